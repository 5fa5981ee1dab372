// End-to-end moves through the real binaries: two `capsule serve` sidecars on loopback (TLS
// 1.3, certificates from tests/make_pki.sh), a real capsulefs mount as the source, a writer
// that keeps writing files/ during the move, a link cut mid-stream (tests/cut_proxy), and a
// client whose certificate no sidecar trusts.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <random>
#include <set>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/poll.h"
#include "tests/sidecar_runner.h"
#include "tests/cut_proxy.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;
using testing::RunProgram;

using testing::IsMounted;
using testing::Mount;
using testing::Put;
using testing::WaitUntil;


// capsule serve's --mount-to DIR, or nothing for no folder.
std::vector<std::string> MountTo(const std::string& dir) {
  if (dir.empty()) return {};
  return {"--mount-to", dir};
}

std::string StateOf(const std::string& dir) {
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (!record.ok()) return PathExists(dir) ? "none" : "absent";
  return std::string(HolderStateName(record->state)) + "@" + std::to_string(record->epoch);
}


class MoveE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("move-e2e");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    a_ = root_ + "/a";
    b_ = root_ + "/b";
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws).ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/big.bin", std::string(4 << 20, 'b')).ok());
    auto init = RunCapsule({"init", Src(), "--id", "agent-1", "--name", "Agent", "--workspace", ws});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  std::string Src() const { return a_ + "/agent-1"; }
  std::string Dst() const { return b_ + "/agent-1"; }

  testing::RunResult Move(const std::string& source, const std::string& to, const std::string& who = "client") {
    return RunCapsule({"move", source, "--to", to, "--cert", pki_ + "/" + who + ".pem", "--key",
                       pki_ + "/" + who + ".key", "--ca", pki_ + "/ca.pem"});
  }

  void ExpectVerifies(const std::string& dir) {
    auto verify = RunCapsule({"verify", dir});
    EXPECT_EQ(verify.exit_code, 0) << dir << ": " << verify.out << verify.err;
  }

  std::string root_, pki_, seal_, a_, b_;
};

TEST_F(MoveE2eTest, MoveFromAMountWhileAWriterWritesLosesNothingAndRetiresTheOldMount) {
  std::string mnt = root_ + "/mnt", mount_to = root_ + "/mounted";
  ASSERT_TRUE(MakeDirectories(mnt + "").ok());
  Sidecar target(b_, pki_, seal_, MountTo(mount_to));
  std::set<int> written;  // the writer's until it is joined
  std::atomic<int> told{0};  // how many files the writer was told were written
  std::atomic<bool> stop{false};
  std::atomic<int> last_error{0};
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_TRUE(MakeDirectories(mnt + "/files/w").ok());
    std::thread writer([&] {
      for (int i = 0; !stop && i < 100000; ++i) {
        int err = Put(mnt + "/files/w/" + std::to_string(i) + ".txt", "line " + std::to_string(i) + "\n");
        if (err == EBUSY) {  // frozen: a new file waits a moment only; the writer tries again
          --i;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
        if (err != 0) {
          last_error = err;
          return;
        }
        written.insert(i);  // the writer was told this one is written
        ++told;
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    EXPECT_TRUE(WaitUntil([&] { return told >= 3 || last_error != 0; }, 60)) << "the writer never wrote";
    auto moved = Move(mnt, target.address());
    // The writer goes on until the retirement stops it (or 60 s: the EROFS check below fails).
    WaitUntil([&] { return last_error != 0; }, 60);
    stop = true;
    writer.join();
    ASSERT_EQ(moved.exit_code, 0) << moved.err;
    EXPECT_NE(moved.out.find("at epoch 2"), std::string::npos) << moved.out;
    EXPECT_EQ(last_error.load(), EROFS) << "the writer was stopped by the retirement, with EROFS";
    EXPECT_EQ(Put(mnt + "/files/after.txt", "no\n"), EROFS);
    EXPECT_GT(written.size(), 10u) << "the writer kept writing while the copy ran";
  }
  EXPECT_EQ(StateOf(Src()), "retired@1");
  EXPECT_EQ(StateOf(Dst()), "active@2");
  ExpectVerifies(Src());
  ExpectVerifies(Dst());
  // The target mounted what it took over: every file the writer was told was written is there.
  std::string there = mount_to + "/agent-1";
  ASSERT_TRUE(IsMounted(there));
  int missing = 0;
  for (int i : written) {
    Result<std::string> text = ReadFile(there + "/files/w/" + std::to_string(i) + ".txt");
    if (!text.ok() || *text != "line " + std::to_string(i) + "\n") ++missing;
  }
  EXPECT_EQ(missing, 0) << "of " << written.size() << " files the writer was told were written";
  EXPECT_EQ(Put(there + "/files/on-b.txt", "yes\n"), 0) << "the new holder's mount takes writes";
  testing::UnmountPath(there);
}

// Sidecars that mount what they take over (--mount-to): moved there and back, the agent is
// mounted again where its first sidecar had it, the retired mount there unmounted on the
// way; progress is reported line by line with --progress.
TEST_F(MoveE2eTest, AnAgentMovedThereAndBackIsMountedAgainWhereItsSidecarHadIt) {
  std::string mounts_a = root_ + "/mounted-a", mounts_b = root_ + "/mounted-b";
  std::string on_a = mounts_a + "/agent-1", on_b = mounts_b + "/agent-1";
  ASSERT_TRUE(MakeDirectories(on_a).ok());
  auto mounted = RunProgram("./capsulefs", {Src(), on_a});  // as sidecar a would have
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  Sidecar sidecar_a(a_, pki_, seal_, MountTo(mounts_a));
  Sidecar sidecar_b(b_, pki_, seal_, MountTo(mounts_b));
  ASSERT_EQ(Put(on_a + "/files/from-a.txt", "a\n"), 0);
  auto there = Move(on_a, sidecar_b.address());
  ASSERT_EQ(there.exit_code, 0) << there.err;
  ASSERT_TRUE(IsMounted(on_b));
  EXPECT_EQ(Put(on_a + "/files/late.txt", "no\n"), EROFS);
  ASSERT_EQ(Put(on_b + "/files/from-b.txt", "b\n"), 0);

  auto back = RunCapsule({"move", on_b, "--to", sidecar_a.address(), "--cert", pki_ + "/client.pem", "--key",
                          pki_ + "/client.key", "--ca", pki_ + "/ca.pem", "--progress"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  // Each phase ends with its line "done in" (the form: PROGRESS in capsule.1).
  for (const char* phase : {"copy ", "freeze ", "switch ", "activate "}) {
    size_t at = ("\n" + back.err).find(std::string("\n") + phase);
    ASSERT_NE(at, std::string::npos) << "no progress line for " << phase << "in: " << back.err;
    EXPECT_NE(back.err.find(", done in ", at), std::string::npos) << phase << "in: " << back.err;
  }
  EXPECT_NE(back.err.find(" MiB/s"), std::string::npos) << back.err;
  EXPECT_EQ(StateOf(Src()), "active@3");
  EXPECT_EQ(StateOf(Dst()), "retired@2");
  ASSERT_TRUE(IsMounted(on_a)) << "sidecar a mounts the agent again";
  Result<std::string> from_b = ReadFile(on_a + "/files/from-b.txt");
  ASSERT_TRUE(from_b.ok()) << from_b.status().ToString();
  EXPECT_EQ(*from_b, "b\n");
  EXPECT_EQ(Put(on_a + "/files/again.txt", "yes\n"), 0);
  EXPECT_EQ(Put(on_b + "/files/late.txt", "no\n"), EROFS);
  testing::UnmountPath(on_a);
  testing::UnmountPath(on_b);
  ExpectVerifies(Src());
  ExpectVerifies(Dst());
}

TEST_F(MoveE2eTest, ConnectionCutMidStreamRollsBack) {
  Sidecar target(b_, pki_, seal_);
  Result<std::unique_ptr<testing::CutProxy>> proxy = testing::CutProxy::Start(target.address());
  ASSERT_TRUE(proxy.ok()) << proxy.status().ToString();
  (*proxy)->CutAfter(1 << 20);  // a quarter into the 4 MiB file
  auto cut = Move(Src(), (*proxy)->address());
  EXPECT_EQ(cut.exit_code, 1) << cut.out << cut.err;
  EXPECT_NE(cut.err.find("capsule: "), std::string::npos) << cut.err;
  EXPECT_GE((*proxy)->cuts(), 1);
  EXPECT_EQ(StateOf(Src()), "active@1") << "rolled back: the source runs on at its old epoch";
  EXPECT_FALSE(PathExists(Dst()));
  // The target noticed the dead link and emptied its staging area.
  for (int i = 0; i < 100 && PathExists(b_ + "/.staging/agent-1"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_FALSE(PathExists(b_ + "/.staging/agent-1"));
  ExpectVerifies(Src());
  // With the link healed the same move goes through.
  (*proxy)->CutAfter(testing::CutProxy::kNever);
  auto again = Move(Src(), (*proxy)->address());
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(StateOf(Dst()), "active@2");
  ExpectVerifies(Dst());
}

// The target resolves the journal's models before it takes the agent: an agent whose current model is
// one it cannot render for is refused, and runs on where it was; once it switches to a model
// the target can serve, the move goes through.
TEST_F(MoveE2eTest, ATargetRefusesAnAgentWhoseModelItCannotRender) {
  Sidecar target(b_, pki_, seal_);
  auto to_acme = RunCapsule({"log", "append", Src(), "--type", "model_switch", "--data",
                             R"({"provider":"acme","model":"a1"})"});
  ASSERT_EQ(to_acme.exit_code, 0) << to_acme.err;
  auto refused = Move(Src(), target.address());
  EXPECT_EQ(refused.exit_code, 1) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("rendering the staged journal"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("acme"), std::string::npos) << refused.err;
  EXPECT_EQ(StateOf(Src()), "active@1");
  EXPECT_FALSE(PathExists(b_ + "/.staging/agent-1"));
  auto to_gemini = RunCapsule({"log", "append", Src(), "--type", "model_switch", "--data",
                               R"({"provider":"gemini","model":"gemini-2.5-pro"})"});
  ASSERT_EQ(to_gemini.exit_code, 0) << to_gemini.err;
  auto moved = Move(Src(), target.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(StateOf(Dst()), "active@2");
  ExpectVerifies(Dst());
}

// One sidecar per root: a second on the same root would empty the first's staging area under
// a running move. It refuses to start, naming the first's pid, and touches nothing.
TEST_F(MoveE2eTest, ASecondSidecarOnTheSameRootRefusesToStart) {
  Sidecar first(b_, pki_, seal_);
  ASSERT_TRUE(MakeDirectories(b_ + "/.staging/agent-1").ok());
  ASSERT_TRUE(WriteFileAtomic(b_ + "/.staging/agent-1/in-flight", "x").ok());
  auto second = RunCapsule({"serve", "--root", b_, "--listen", "127.0.0.1:0", "--cert", pki_ + "/server.pem", "--key",
                            pki_ + "/server.key", "--ca", pki_ + "/ca.pem", "--seal-key", seal_});
  EXPECT_EQ(second.exit_code, 1) << second.out << second.err;
  EXPECT_NE(second.err.find("another capsule serve serves it: held by pid "), std::string::npos) << second.err;
  EXPECT_TRUE(PathExists(b_ + "/.staging/agent-1/in-flight"));
  // The first still serves.
  auto moved = Move(Src(), first.address());
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
}

// A peer with a trusted certificate that sends hostile messages gets an error reply or a
// dropped connection for each, the sidecar touches nothing outside its root, keeps serving,
// and moves the agent afterwards.
TEST_F(MoveE2eTest, HostileMessagesFromATrustedPeerAreRefusedAndTheSidecarServesOn) {
  Sidecar target(b_, pki_, seal_);
  std::string victim = root_ + "/victim";
  ASSERT_TRUE(MakeDirectories(victim).ok());
  ASSERT_TRUE(WriteFileAtomic(victim + "/keep.txt", "mine").ok());
  const std::string move = "0123456789abcdef0123456789abcdef";
  std::vector<std::string> messages = {
      R"({"agent":"../../victim","call":"abort","move":")" + move + R"("})",
      R"({"agent":"../../victim","call":"activate","epoch":2,"move":")" + move + R"("})",
      R"({"agent":1,"call":"offer","epoch":"two","move":[]})",
      R"({"call":"drop tables"})",
      R"(["not","an","object"])",
      "{\"call\":\"query\",\"agent\":\"agent-1\",\"d\":" + std::string(300, '[') + std::string(300, ']') + "}",
      "raw:7fffffff",        // a length over 64 MiB
      "raw:0000001000",      // a message cut short: waited on, never answered
  };
  std::string command = "python3 tests/hostile_peer.py " + target.address() + " " + pki_ + "/client.pem " + pki_ +
                        "/client.key " + pki_ + "/ca.pem";
  for (const std::string& message : messages) command += " '" + message + "'";
  auto peer = RunProgram("sh", {"-c", command});
  ASSERT_EQ(peer.exit_code, 0) << peer.err;
  std::vector<std::string> replies;
  for (size_t start = 0, end; (end = peer.out.find('\n', start)) != std::string::npos; start = end + 1) {
    replies.push_back(peer.out.substr(start, end - start));
  }
  ASSERT_EQ(replies.size(), messages.size()) << peer.out;
  // A well-framed request with bad fields gets an error reply; a message that is not one (not
  // an object, nested too deep, too long, cut short) ends the connection.
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NE(replies[i].find("\"ok\":false"), std::string::npos) << messages[i] << " -> " << replies[i];
  }
  EXPECT_NE(replies[0].find("InvalidArgument"), std::string::npos) << replies[0];
  for (size_t i = 4; i + 1 < messages.size(); ++i) {
    EXPECT_EQ(replies[i].rfind("closed", 0), 0u) << messages[i] << " -> " << replies[i];
  }
  EXPECT_TRUE(replies.back() == "no reply" || replies.back().rfind("closed", 0) == 0) << replies.back();
  EXPECT_EQ(*ReadFile(victim + "/keep.txt"), "mine");
  auto moved = Move(Src(), target.address());
  EXPECT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(StateOf(Dst()), "active@2");
}

TEST_F(MoveE2eTest, UntrustedClientIsRefusedBeforeAnyByteMoves) {
  Sidecar target(b_, pki_, seal_);
  auto rogue = Move(Src(), target.address(), "rogue");
  EXPECT_EQ(rogue.exit_code, 1) << rogue.out << rogue.err;
  EXPECT_NE(rogue.err.find("capsule: "), std::string::npos);
  EXPECT_EQ(StateOf(Src()), "active@1");
  EXPECT_FALSE(PathExists(Dst()));
  EXPECT_FALSE(PathExists(b_ + "/.staging/agent-1"));
}

// Links are data: a workspace with a virtualenv's interpreter link, a relative chain that
// climbs out of the workspace and a dangling link is taken in by init without reading through
// any of them, gets one more link through the mount, verifies, survives export and import,
// and moves, each target exactly as written.
TEST_F(MoveE2eTest, ACapsuleWithLinksOfEveryKindVerifiesExportsAndMoves) {
  std::string ws = root_ + "/venv-ws", outside = root_ + "/outside";
  ASSERT_TRUE(MakeDirectories(ws + "/venv/bin").ok());
  ASSERT_TRUE(MakeDirectories(ws + "/deep").ok());
  ASSERT_TRUE(WriteFileAtomic(outside, "secret beside the workspace\n").ok());
  const std::vector<std::pair<std::string, std::string>> links = {
      {"venv/bin/python", "/usr/bin/python3"},
      {"venv/bin/python3", "python"},
      {"up", "../outside"},
      {"deep/chain", "../up"},
      {"dangling", "no/such/file"}};
  for (const auto& [path, target] : links) ASSERT_EQ(::symlink(target.c_str(), (ws + "/" + path).c_str()), 0) << path;
  std::string cap = root_ + "/a/agent-2";
  auto init = RunCapsule({"init", cap, "--id", "agent-2", "--name", "Links", "--workspace", ws});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  // init read no file through a link: the only blobs are the empty one and none other.
  auto snapshot_text = ReadFile(cap + "/artifacts/snapshot.json");
  ASSERT_TRUE(snapshot_text.ok());
  EXPECT_EQ(snapshot_text->find("sha256"), std::string::npos) << *snapshot_text;

  {
    std::string mnt = root_ + "/links-mnt";
    ASSERT_TRUE(MakeDirectories(mnt).ok());
    Mount mount(cap, mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::symlink("/etc/passwd", (mnt + "/files/abs").c_str()), 0) << std::strerror(errno);
    char target[64] = {};
    ASSERT_EQ(::readlink((mnt + "/files/venv/bin/python").c_str(), target, sizeof target - 1), 16);
    EXPECT_STREQ(target, "/usr/bin/python3");
  }
  ExpectVerifies(cap);
  auto exported = RunCapsule({"export", cap, "-o", root_ + "/links.tar"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  std::string imported = root_ + "/imported";
  auto import = RunCapsule({"import", root_ + "/links.tar", imported});
  ASSERT_EQ(import.exit_code, 0) << import.err;
  EXPECT_EQ(*ReadFile(imported + "/artifacts/snapshot.json"), *ReadFile(cap + "/artifacts/snapshot.json"));

  Sidecar target_b(b_, pki_, seal_);
  auto moved = Move(cap, target_b.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  std::string there = b_ + "/agent-2";
  ExpectVerifies(there);
  auto arrived = ReadFile(there + "/artifacts/snapshot.json");
  ASSERT_TRUE(arrived.ok());
  for (const auto& [path, link] : links) {
    EXPECT_NE(arrived->find("\"" + path + "\":{\"target\":\"" + link + "\",\"type\":\"link\"}"), std::string::npos)
        << path << " in " << *arrived;
  }
  EXPECT_NE(arrived->find(R"("abs":{"target":"/etc/passwd","type":"link"})"), std::string::npos) << *arrived;
  EXPECT_EQ(*ReadFile(outside), "secret beside the workspace\n");
}

TEST_F(MoveE2eTest, MoveBackSendsOnlyTheChangeAndAStaleOfferIsRefused) {
  Sidecar sidecar_b(b_, pki_, seal_);
  Sidecar sidecar_a(a_, pki_, seal_);
  ASSERT_EQ(Move(Src(), sidecar_b.address()).exit_code, 0);
  auto log = RunCapsule({"log", "append", Dst(), "--type", "user_message", "--data", R"({"text":"on b"})"});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  auto back = RunCapsule({"move", Dst(), "--to", sidecar_a.address(), "--cert", pki_ + "/client.pem", "--key",
                          pki_ + "/client.key", "--ca", pki_ + "/ca.pem", "--json"});
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_NE(back.out.find(R"("copy_files":1)"), std::string::npos) << "only the journal: " << back.out;
  EXPECT_EQ(StateOf(Src()), "active@3");
  EXPECT_EQ(StateOf(Dst()), "retired@2");
  ExpectVerifies(Src());
  // B, woken with a stale record that says it runs the agent at epoch 2, offers epoch 3 to A.
  HolderRecord stale = *HolderRecord::Load(Dst());
  stale.state = HolderState::kActive;
  ASSERT_TRUE(stale.Save(Dst()).ok());
  auto refused = Move(Dst(), sidecar_a.address());
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("holds the agent"), std::string::npos) << refused.err;
  EXPECT_EQ(StateOf(Src()), "active@3");
}

// An agent that goes on talking while it is copied: its journal grows after the copy, and the
// switch carries the events appended since, not the history again. The target's journal is
// the source's, every event the writer was told was appended in it.
TEST_F(MoveE2eTest, TheSwitchCarriesTheEventsAppendedDuringTheCopyNotTheWholeJournal) {
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Sidecar target(b_, pki_, seal_);
  const std::string journal = mnt + "/memory/timeline_events.jsonl";
  auto event = [](const std::string& text) { return R"({"data":{"text":")" + text + R"("},"type":"user_message"})" "\n"; };
  std::atomic<bool> stop{false};
  std::atomic<int> told{0};
  testing::RunResult moved;
  uint64_t history = 0;
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    {
      // A history of 20,000 events (about 5 MB), 500 to a write.
      UniqueFd fd(::open(journal.c_str(), O_WRONLY | O_APPEND));
      ASSERT_TRUE(fd.valid());
      for (int batch = 0; batch < 40; ++batch) {
        std::string lines;
        for (int i = 0; i < 500; ++i) lines += event("history " + std::to_string(batch * 500 + i));
        ASSERT_TRUE(WriteAll(fd.get(), lines, journal).ok());
      }
    }
    struct stat st;
    ASSERT_EQ(::stat((Src() + "/memory/timeline_events.jsonl").c_str(), &st), 0);
    history = static_cast<uint64_t>(st.st_size);
    ASSERT_GT(history, 4u << 20);
    std::thread talker([&] {
      while (!stop) {
        const std::string line = event("said " + std::to_string(told.load()));
        UniqueFd fd(::open(journal.c_str(), O_WRONLY | O_APPEND));
        if (!fd.valid() || ::write(fd.get(), line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
          if (errno == EROFS) return;  // retired: the agent talks on the target now
          std::this_thread::sleep_for(std::chrono::milliseconds(20));  // frozen a moment
          continue;
        }
        ++told;
        std::this_thread::sleep_for(std::chrono::milliseconds(3));
      }
    });
    EXPECT_TRUE(WaitUntil([&] { return told > 0; }, 60)) << "the talker never talked";
    moved = RunCapsule({"move", mnt, "--to", target.address(), "--cert", pki_ + "/client.pem", "--key",
                        pki_ + "/client.key", "--ca", pki_ + "/ca.pem", "--json"});
    stop = true;
    talker.join();
  }
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  Result<Json> report = ParseJson(moved.out, "report");
  ASSERT_TRUE(report.ok()) << moved.out;
  // The events said between the copy and the freeze (the talker says one every few ms while
  // the target checks the copy), not the history again.
  EXPECT_GT(report->value("switch_file_bytes", uint64_t{0}), 0u) << moved.out;
  EXPECT_LT(report->value("switch_file_bytes", uint64_t{0}), history / 4) << moved.out;
  EXPECT_GT(told.load(), 0);
  Result<std::string> there = ReadFile(Dst() + "/memory/timeline_events.jsonl");
  ASSERT_TRUE(there.ok());
  EXPECT_EQ(*there, *ReadFile(Src() + "/memory/timeline_events.jsonl"));
  EXPECT_GT(there->size(), history) << "the events said during the copy arrived";
  int missing = 0;
  for (int i = 0; i < told; ++i) missing += there->find("\"said " + std::to_string(i) + "\"") == std::string::npos;
  EXPECT_EQ(missing, 0) << "of " << told << " events the talker was told were appended";
  ExpectVerifies(Dst());
}

// A target sidecar that may not write a file as large as one it receives (ulimit -f) refuses
// the copy with EFBIG, the source keeps the agent, and the sidecar serves on: the next move,
// once it may, goes through. Before, the signal for such a write (SIGXFSZ) ended the sidecar.
TEST_F(MoveE2eTest, ATargetThatMayNotWriteSoLargeAFileRefusesTheCopyAndServesOn) {
  Sidecar target(b_, pki_, seal_);
  struct rlimit limit {};
  ASSERT_EQ(::prlimit(target.pid(), RLIMIT_FSIZE, nullptr, &limit), 0);
  const struct rlimit small {1 << 20, limit.rlim_max};  // big.bin is 4 MiB
  ASSERT_EQ(::prlimit(target.pid(), RLIMIT_FSIZE, &small, nullptr), 0);
  auto refused = Move(Src(), target.address());
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_NE(refused.err.find("File too large"), std::string::npos) << refused.err;
  EXPECT_EQ(StateOf(Src()), "active@1");
  ASSERT_EQ(::kill(target.pid(), 0), 0) << "the sidecar ended";
  ASSERT_EQ(::prlimit(target.pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
  auto moved = Move(Src(), target.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_EQ(StateOf(Dst()), "active@2");
  ExpectVerifies(Dst());
}

// The source of a move packs its stream on one thread into a pipe that the sending thread
// empties: it holds a few MiB of the stream at a time, however large. Before, the pipe kept
// every byte it had passed while its writer stayed ahead of the sending (a 1 GiB capsule made
// a source of 1-2 GiB).
TEST_F(MoveE2eTest, TheSourceOfAMoveHoldsAFewMiBOfItsStreamNotAllOfIt) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator keeps freed memory in quarantine";
#endif
  const std::string ws = root_ + "/large", source = root_ + "/large-src/agent-2";
  ASSERT_TRUE(MakeDirectories(ws).ok());
  std::mt19937_64 random(7);
  std::string body(8 << 20, '\0');
  for (int i = 0; i < 12; ++i) {  // 96 MiB that does not compress
    for (size_t j = 0; j + 8 <= body.size(); j += 8) {
      uint64_t word = random();
      std::memcpy(&body[j], &word, 8);
    }
    ASSERT_TRUE(WriteFileAtomic(ws + "/part" + std::to_string(i) + ".bin", body).ok());
  }
  body.clear();
  body.shrink_to_fit();
  auto init = RunCapsule({"init", source, "--id", "agent-2", "--name", "Large", "--workspace", ws});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  Sidecar sidecar_b(b_, pki_, seal_);
  auto moved = Move(source, sidecar_b.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  ExpectVerifies(b_ + "/agent-2");
  EXPECT_EQ(StateOf(source), "retired@1");
  ASSERT_GT(moved.peak_rss_kib, 0);
  EXPECT_LT(moved.peak_rss_kib, 48 << 10) << "the source held " << moved.peak_rss_kib / 1024
                                           << " MiB for a stream of 96 MiB";
}

// The target checks the journal a move brings a block at a time and keeps of its events only
// what resolving each conversation's model needs: a long conversation costs its sidecar a
// few MiB, not the journal's size several times over (before, it read the journal whole and
// held every event parsed: a journal of 65 MiB took its peak from 10 to 282 MiB; now 22).
TEST_F(MoveE2eTest, ATargetChecksALongJournalInAFewMiB) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator keeps freed memory in quarantine";
#endif
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  const std::string journal = mnt + "/memory/timeline_events.jsonl";
  const std::string text(4000, 'w');
  {
    Mount mount(Src(), mnt);
    ASSERT_TRUE(mount.up());
    UniqueFd fd(::open(journal.c_str(), O_WRONLY | O_APPEND));
    ASSERT_TRUE(fd.valid());
    for (int batch = 0; batch < 1000; ++batch) {  // 16,000 events of 4 KB, 16 to a write
      std::string lines;
      for (int i = 0; i < 16; ++i) {
        lines += R"({"data":{"text":")" + text + std::to_string(batch * 16 + i) + R"("},"type":"user_message"})" "\n";
      }
      if (batch == 999) lines += R"({"data":{"model":"claude-x","provider":"anthropic"},"type":"model_switch"})" "\n";
      ASSERT_TRUE(WriteAll(fd.get(), lines, journal).ok());
    }
  }
  struct stat st;
  ASSERT_EQ(::stat((Src() + "/memory/timeline_events.jsonl").c_str(), &st), 0);
  ASSERT_GT(st.st_size, 64 << 20);
  Sidecar target(b_, pki_, seal_);
  const double at_rest = testing::ProcStatusMiB(target.pid(), "VmHWM");
  auto moved = Move(Src(), target.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  const double peak = testing::ProcStatusMiB(target.pid(), "VmHWM");
  ASSERT_GT(at_rest, 0);
  EXPECT_LT(peak - at_rest, 24) << "the target's peak went from " << at_rest << " to " << peak
                                << " MiB for a journal of " << (st.st_size >> 20) << " MiB";
  ExpectVerifies(Dst());
  EXPECT_EQ(*ReadFile(Dst() + "/memory/timeline_events.jsonl"), *ReadFile(Src() + "/memory/timeline_events.jsonl"));
}

TEST_F(MoveE2eTest, RestartedSidecarsResolveWhatAMoveLeftWithoutGuessing) {
  // What a crash of both ends right after "activate sent" leaves, when activate never
  // arrived: the source frozen with its move recorded, the target with a staging area.
  ASSERT_TRUE(MakeDirectories(b_ + "/.staging/agent-1/files").ok());
  HolderRecord frozen = *HolderRecord::Load(Src());
  frozen.state = HolderState::kFrozen;
  frozen.move = "0123456789abcdef0123456789abcdef";  // frozen for that move, as its mover records
  ASSERT_TRUE(frozen.Save(Src()).ok());
  {
    Sidecar target(b_, pki_, seal_);  // restarted: empties its staging areas
    EXPECT_FALSE(PathExists(b_ + "/.staging/agent-1"));
    std::string record = R"({"agent":"agent-1","epoch":2,"move":"0123456789abcdef0123456789abcdef",)"
                         R"("phase":"activate-sent","to":")" + target.address() + "\"}\n";
    ASSERT_TRUE(WriteFileAtomic(Src() + "/.capsule/move-out.json", record).ok());
    // A new move waits for the old one to be resolved.
    auto refused = Move(Src(), target.address());
    EXPECT_EQ(refused.exit_code, 1);
    EXPECT_NE(refused.err.find("unresolved"), std::string::npos) << refused.err;
    Sidecar source(a_, pki_, seal_);  // restarted: asks the target, which holds nothing: thaw
    // The resolution thaws, then forgets the move, then lets go of the move lock: wait for all.
    for (int i = 0; i < 100 && (StateOf(Src()) != "active@1" || PathExists(Src() + "/.capsule/move-out.json"));
         ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(StateOf(Src()), "active@1");
    EXPECT_FALSE(PathExists(Src() + "/.capsule/move-out.json"));
    EXPECT_FALSE(PathExists(Dst()));
    // And the agent moves on as usual afterwards (once the resolution has let go of its lock).
    auto moved = Move(Src(), target.address());
    for (int i = 0; i < 40 && moved.exit_code != 0 && moved.err.find("is running here") != std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      moved = Move(Src(), target.address());
    }
    ASSERT_EQ(moved.exit_code, 0) << moved.err;
    EXPECT_EQ(StateOf(Dst()), "active@2");
  }
}

TEST_F(MoveE2eTest, ARecordedMoveIsResolvedByRecoverOnceTheTargetAnswers) {
  Sidecar target(b_, pki_, seal_);
  ASSERT_EQ(Move(Src(), target.address()).exit_code, 0);
  // As if the source had crashed after activate was answered but before it retired.
  HolderRecord frozen = *HolderRecord::Load(Src());
  frozen.state = HolderState::kFrozen;
  frozen.move = "0123456789abcdef0123456789abcdef";
  ASSERT_TRUE(frozen.Save(Src()).ok());
  std::string record = R"({"agent":"agent-1","epoch":2,"move":"0123456789abcdef0123456789abcdef",)"
                       R"("phase":"activate-sent","to":")" + target.address() + "\"}\n";
  ASSERT_TRUE(WriteFileAtomic(Src() + "/.capsule/move-out.json", record).ok());
  auto recovered = RunCapsule({"move", Src(), "--to", target.address(), "--cert", pki_ + "/client.pem", "--key",
                               pki_ + "/client.key", "--ca", pki_ + "/ca.pem", "--recover"});
  ASSERT_EQ(recovered.exit_code, 0) << recovered.err;
  EXPECT_EQ(StateOf(Src()), "retired@1") << "the target holds the new epoch: the source retires";
  EXPECT_EQ(StateOf(Dst()), "active@2");
}

}  // namespace
}  // namespace capsule
