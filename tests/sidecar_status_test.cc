// The sidecar as its operator sees it, end to end: a real `capsule serve` on loopback
// (certificates from tests/make_pki.sh), its log on standard error (one line per event:
// accepted, refused and why, copied, switched, activated, aborted, recovered),
// `capsule sidecar status` during and after moves, and `capsule move --progress`.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;
using testing::RunProgram;
using testing::RunResult;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}


class SidecarStatusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("sidecar-status");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws).ok());
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(WriteFileAtomic(ws + "/f" + std::to_string(i), std::string(1 << 20, static_cast<char>('a' + i))).ok());
    }
    RunResult init = RunCapsule({"init", root_ + "/a/agent-1", "--id", "agent-1", "--name", "Agent", "--workspace", ws});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_TRUE(MakeDirectories(root_ + "/b").ok());
  }

  RunResult Status(const std::string& root) { return RunCapsule({"sidecar", "status", "--root", root, "--json"}); }

  // Sends each message to the sidecar as the wire frames it; one reply line per message.
  std::vector<std::string> Peer(const std::string& address, const std::vector<std::string>& messages) {
    std::string command = "python3 tests/hostile_peer.py " + address + " " + pki_ + "/client.pem " + pki_ +
                          "/client.key " + pki_ + "/ca.pem";
    for (const std::string& message : messages) command += " '" + message + "'";
    RunResult peer = RunProgram("sh", {"-c", command});
    EXPECT_EQ(peer.exit_code, 0) << peer.err;
    std::vector<std::string> replies;
    for (size_t start = 0, end; (end = peer.out.find('\n', start)) != std::string::npos; start = end + 1) {
      replies.push_back(peer.out.substr(start, end - start));
    }
    return replies;
  }

  // The log's lines that name `event` (after the time and "serve:").
  std::vector<std::string> LogLines(const std::string& event) {
    std::vector<std::string> lines;
    std::string log = *ReadFile(root_ + "/serve.log");
    static const std::regex form(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ serve: (\S+) .*$)");
    for (size_t start = 0, end; (end = log.find('\n', start)) != std::string::npos; start = end + 1) {
      std::string line = log.substr(start, end - start);
      std::smatch m;
      if (std::regex_match(line, m, form) && m[1] == event) lines.push_back(line);
    }
    return lines;
  }

  std::string root_, pki_, seal_;
};

TEST_F(SidecarStatusTest, TheLogAndTheStatusFollowEveryMoveAndEveryRefusal) {
  Sidecar target(root_ + "/b", pki_, seal_, {}, root_ + "/serve.log");
  // Running, holding nothing yet.
  RunResult empty = Status(root_ + "/b");
  ASSERT_EQ(empty.exit_code, 0) << empty.err;
  Result<Json> idle = ParseJson(empty.out, "status");
  ASSERT_TRUE(idle.ok()) << empty.out;
  EXPECT_EQ((*idle)["running"], true);
  EXPECT_EQ((*idle)["pid"], target.pid());
  EXPECT_EQ((*idle)["listen"], target.address());
  EXPECT_TRUE((*idle)["agents"].empty());
  EXPECT_TRUE((*idle)["moves"].empty());

  // A move, with progress lines on standard error (not a terminal: --progress).
  ::setenv("CAPSULE_PROGRESS_INTERVAL_MS", "0", 1);
  RunResult moved = RunCapsule({"move", root_ + "/a/agent-1", "--to", target.address(), "--cert",
                                pki_ + "/client.pem", "--key", pki_ + "/client.key", "--ca", pki_ + "/ca.pem",
                                "--progress"});
  ::unsetenv("CAPSULE_PROGRESS_INTERVAL_MS");
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  static const std::regex progress(
      R"(^(copy|switch|preverify|freeze|activate) +\d+\.\d MiB(?: of \d+\.\d MiB)?, \d+(?: of \d+)? files, \d+\.\d MiB/s(?:, \d+\.\d s left|, done in \d+\.\d s)?$)");
  int copy_lines = 0;
  bool copy_done = false;
  for (size_t start = 0, end; (end = moved.err.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string line = moved.err.substr(start, end - start);
    EXPECT_TRUE(std::regex_match(line, progress)) << "not a progress line: '" << line << "'";
    if (line.rfind("copy ", 0) == 0) ++copy_lines;
    if (line.rfind("copy ", 0) == 0 && Contains(line, "done in")) {
      copy_done = true;
      // The six workspace files and the four documents (notes, journal, index, spec).
      EXPECT_TRUE(Contains(line, "6.0 MiB of 6.0 MiB, 10 of 10 files")) << line;
    }
  }
  EXPECT_GE(copy_lines, 3) << moved.err;
  EXPECT_TRUE(copy_done) << moved.err;
  for (const char* phase : {"switch ", "freeze ", "activate "}) EXPECT_TRUE(Contains(moved.err, phase)) << moved.err;

  // One log line per step of it.
  for (const char* event : {"accepted", "copied", "switched", "activated"}) {
    std::vector<std::string> lines = LogLines(event);
    ASSERT_EQ(lines.size(), 1u) << event << ":\n" << *ReadFile(root_ + "/serve.log");
    EXPECT_TRUE(Contains(lines[0], "agent=agent-1 ")) << lines[0];
    EXPECT_TRUE(Contains(lines[0], " epoch=2 ")) << lines[0];
    EXPECT_TRUE(Contains(lines[0], "peer=")) << lines[0];
  }
  RunResult after = Status(root_ + "/b");
  ASSERT_EQ(after.exit_code, 0) << after.err;
  Result<Json> held = ParseJson(after.out, "status");
  ASSERT_TRUE(held.ok()) << after.out;
  ASSERT_EQ((*held)["agents"].size(), 1u) << after.out;
  EXPECT_EQ((*held)["agents"][0], (Json{{"agent", "agent-1"}, {"epoch", 2}, {"state", "active"}}));
  EXPECT_TRUE((*held)["moves"].empty()) << after.out;

  // A stale offer is refused, and the log says why.
  const std::string move = "0123456789abcdef0123456789abcdef";
  std::vector<std::string> refused =
      Peer(target.address(), {R"({"agent":"agent-1","call":"offer","epoch":1,"move":")" + move + R"("})"});
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_TRUE(Contains(refused[0], "\"ok\":false")) << refused[0];
  std::vector<std::string> refusals = LogLines("refused");
  ASSERT_EQ(refusals.size(), 1u) << *ReadFile(root_ + "/serve.log");
  EXPECT_TRUE(Contains(refusals[0], "refused offer agent=agent-1 move=" + move + " epoch=1 ")) << refusals[0];
  EXPECT_TRUE(Contains(refusals[0], " why=\"")) << refusals[0];

  // An offer for a new agent: in flight, "offered", until aborted.
  std::vector<std::string> offered =
      Peer(target.address(), {R"({"agent":"agent-2","call":"offer","epoch":1,"move":")" + move + R"("})"});
  ASSERT_EQ(offered.size(), 1u);
  EXPECT_TRUE(Contains(offered[0], "\"ok\":true")) << offered[0];
  RunResult during = Status(root_ + "/b");
  Result<Json> flying = ParseJson(during.out, "status");
  ASSERT_TRUE(flying.ok()) << during.out;
  ASSERT_EQ((*flying)["moves"].size(), 1u) << during.out;
  EXPECT_EQ((*flying)["moves"][0]["direction"], "in");
  EXPECT_EQ((*flying)["moves"][0]["agent"], "agent-2");
  EXPECT_EQ((*flying)["moves"][0]["move"], move);
  EXPECT_EQ((*flying)["moves"][0]["phase"], "offered");
  EXPECT_EQ((*flying)["moves"][0]["epoch"], 1);
  RunResult text = RunCapsule({"sidecar", "status", "--root", root_ + "/b"});
  EXPECT_EQ(text.exit_code, 0);
  EXPECT_TRUE(Contains(text.out, "sidecar running (pid " + std::to_string(target.pid()) + ") on " + target.address()))
      << text.out;
  EXPECT_TRUE(Contains(text.out, "  agent-1\tepoch 2\tactive\n")) << text.out;
  EXPECT_TRUE(Contains(text.out, "  in\tagent-2\t" + move + "\tepoch 1\toffered\tfrom ")) << text.out;
  std::vector<std::string> aborted =
      Peer(target.address(), {R"({"agent":"agent-2","call":"abort","move":")" + move + R"("})"});
  ASSERT_EQ(aborted.size(), 1u);
  EXPECT_EQ(LogLines("aborted").size(), 1u) << *ReadFile(root_ + "/serve.log");
  Result<Json> calm = ParseJson(Status(root_ + "/b").out, "status");
  ASSERT_TRUE(calm.ok());
  EXPECT_TRUE((*calm)["moves"].empty()) << calm->dump();

  // Stopped: the status says so; a root no sidecar served is not found.
  target.Stop();
  Result<Json> stopped = ParseJson(Status(root_ + "/b").out, "status");
  ASSERT_TRUE(stopped.ok());
  EXPECT_EQ((*stopped)["running"], false);
  EXPECT_EQ((*stopped)["agents"].size(), 1u);
  RunResult never = Status(root_ + "/a");
  EXPECT_EQ(never.exit_code, 1);
  Result<Json> error = ParseJson(never.out, "status");
  ASSERT_TRUE(error.ok()) << never.out;
  EXPECT_EQ((*error)["error"]["code"], "not_found");
  EXPECT_TRUE(Contains(never.err, "no sidecar has served it")) << never.err;
}

TEST_F(SidecarStatusTest, AStagingAreaLeftMidWayIsRecoveredAtStartAndLogged) {
  // What a sidecar killed mid-move leaves: a staging area for the agent.
  ASSERT_TRUE(MakeDirectories(root_ + "/b/.staging/agent-9/memory").ok());
  RunResult before = Status(root_ + "/b");
  EXPECT_EQ(before.exit_code, 1) << before.out;  // never served
  ASSERT_TRUE(WriteFileAtomic(root_ + "/b/.sidecar.lock", "").ok());
  Result<Json> left = ParseJson(Status(root_ + "/b").out, "status");
  ASSERT_TRUE(left.ok());
  EXPECT_EQ((*left)["running"], false);
  ASSERT_EQ((*left)["moves"].size(), 1u) << left->dump();
  EXPECT_EQ((*left)["moves"][0]["agent"], "agent-9");
  {
    Sidecar target(root_ + "/b", pki_, seal_, {}, root_ + "/serve.log");
    std::vector<std::string> recovered = LogLines("recovered");
    ASSERT_EQ(recovered.size(), 1u) << *ReadFile(root_ + "/serve.log");
    EXPECT_TRUE(Contains(recovered[0], "recovered move-in agent=agent-9: ")) << recovered[0];
    Result<Json> now = ParseJson(Status(root_ + "/b").out, "status");
    ASSERT_TRUE(now.ok());
    EXPECT_EQ((*now)["running"], true);
    EXPECT_TRUE((*now)["moves"].empty()) << now->dump();
  }
}

}  // namespace
}  // namespace capsule
