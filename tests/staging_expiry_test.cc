// Staging that ends, through the real binaries: a sidecar rolls back a move in flight whose
// source has said nothing for --staging-timeout seconds (its staging area removed, its line
// gone from the status, a late call of it refused), and refuses an offer past
// --max-moves-per-source while a real move still goes through.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/poll.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using Clock = std::chrono::steady_clock;
using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunResult;
using testing::Sidecar;
using testing::WaitUntil;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// Each message sent on a connection of its own by tests/hostile_peer.py; its reply lines.
std::vector<std::string> Peer(const std::string& address, const std::string& pki, const std::vector<std::string>& messages) {
  std::vector<std::string> args = {"tests/hostile_peer.py", address, pki + "/client.pem", pki + "/client.key",
                                   pki + "/ca.pem"};
  args.insert(args.end(), messages.begin(), messages.end());
  RunResult run = testing::RunProgram("python3", args);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = run.out.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(run.out.substr(start, end - start));
  }
  lines.resize(messages.size());
  return lines;
}

std::string MoveId(int n) {
  std::string id = std::to_string(n);
  return std::string(32 - id.size(), '0') + id;
}

std::string Offer(const std::string& agent, int move, int epoch = 1) {
  return R"({"agent":")" + agent + R"(","call":"offer","epoch":)" + std::to_string(epoch) + R"(,"move":")" +
         MoveId(move) + R"("})";
}

// The folders in `dir` (none when it is missing).
size_t FoldersIn(const std::string& dir) {
  std::vector<std::string> others;
  Result<std::vector<std::string>> files = ListFileNames(dir, &others);
  return files.ok() ? others.size() : 0;
}

class StagingExpiryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    root_ = MakeTempDir("staging-expiry");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    b_ = root_ + "/b";
    log_ = root_ + "/b.log";
  }

  std::string Status() {
    RunResult status = RunCapsule({"sidecar", "status", "--root", b_});
    EXPECT_EQ(status.exit_code, 0) << status.err;
    return status.out;
  }

  std::string root_, pki_, seal_, b_, log_;
};

// Offers then silence: every staging area and every line of the status is gone after the
// timeout; a late call of such a move is refused; a real move, whose calls follow each other
// within it, goes through all the same.
TEST_F(StagingExpiryTest, SilentMovesAreRolledBackAfterTheTimeout) {
  Sidecar sidecar(b_, pki_, seal_, {"--staging-timeout", "2"}, log_);
  const std::vector<std::string> replies =
      Peer(sidecar.address(), pki_, {Offer("junk-1", 1), Offer("junk-2", 2), Offer("junk-3", 3), Offer("junk-4", 4)});
  for (const std::string& reply : replies) EXPECT_TRUE(Contains(reply, R"("ok":true)")) << reply;

  std::string status, log;
  ASSERT_TRUE(WaitUntil(
      [&] {
        status = Status();
        log = ReadFile(log_).ok() ? *ReadFile(log_) : "";
        return FoldersIn(b_ + "/.staging") == 0 && Contains(status, "moves in flight: 0\n") &&
               CountOf(log, " serve: expired offered ") == 4;
      },
      30))
      << "staging: " << FoldersIn(b_ + "/.staging") << "\n" << status << log;
  EXPECT_TRUE(Contains(log, " serve: expired offered agent=junk-1 move=" + MoveId(1) +
                                " epoch=1 peer=sidecar-b why=\"no word from the source for 2 s (--staging-timeout): "
                                "rolled back, its staging area removed\""))
      << log;

  // A late call of a move rolled back finds none.
  const std::vector<std::string> late =
      Peer(sidecar.address(), pki_,
           {R"({"agent":"junk-1","call":"activate","epoch":1,"move":")" + MoveId(1) + R"("})"});
  EXPECT_TRUE(Contains(late[0], "no such move of agent junk-1 is in progress here")) << late[0];

  // A real move is not silent: it goes through.
  std::string ws = root_ + "/ws";
  ASSERT_TRUE(MakeDirectories(ws).ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
  const std::string source = root_ + "/a/agent-1";
  ASSERT_EQ(RunCapsule({"init", source, "--id", "agent-1", "--name", "Agent", "--workspace", ws}).exit_code, 0);
  RunResult moved = RunCapsule({"move", source, "--to", sidecar.address(), "--cert", pki_ + "/client.pem", "--key",
                                pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
  Result<HolderRecord> held = HolderRecord::Load(b_ + "/agent-1");
  ASSERT_TRUE(held.ok());
  EXPECT_EQ(held->state, HolderState::kActive);
}

// One source may have --max-moves-per-source moves in flight: the next offer is refused,
// naming the limit, and taken once one has ended; another offer for an agent the source is
// moving already replaces that move and is not counted twice.
TEST_F(StagingExpiryTest, OffersPastTheLimitPerSourceAreRefused) {
  Sidecar sidecar(b_, pki_, seal_, {"--max-moves-per-source", "3"}, log_);
  std::vector<std::string> replies = Peer(
      sidecar.address(), pki_,
      {Offer("junk-1", 1), Offer("junk-2", 2), Offer("junk-3", 3), Offer("junk-4", 4), Offer("junk-3", 5, 2)});
  for (size_t i : {0, 1, 2, 4}) EXPECT_TRUE(Contains(replies[i], R"("ok":true)")) << i << ": " << replies[i];
  EXPECT_TRUE(Contains(replies[3], "offer of agent junk-4 at epoch 1: refused: 3 moves from \\\"sidecar-b\\\" are in "
                                   "flight here, the most one source may have (capsule serve --max-moves-per-source)"))
      << replies[3];
  EXPECT_EQ(FoldersIn(b_ + "/.staging"), 3u);
  EXPECT_TRUE(Contains(Status(), "moves in flight: 3\n"));

  replies = Peer(sidecar.address(), pki_,
                 {R"({"agent":"junk-1","call":"abort","move":")" + MoveId(1) + R"("})", Offer("junk-4", 6)});
  EXPECT_TRUE(Contains(replies[0], R"("ok":true)")) << replies[0];
  EXPECT_TRUE(Contains(replies[1], R"("ok":true)")) << replies[1];
  EXPECT_EQ(FoldersIn(b_ + "/.staging"), 3u);
}

}  // namespace
}  // namespace capsule
