// Ids and words that come from a peer, through the real binaries: a sidecar refuses move ids
// that are not 32 lowercase hex digits and agent ids `capsule init` would refuse, at every
// call, and its log and `capsule sidecar status` carry no raw ESC, CR or NUL whatever a peer
// sent; `capsule stream unpack` refuses a stream naming such an agent; a source prints a
// target's error escaped; epochs are bounded.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/poll.h"
#include "tests/fake_target_runner.h"
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

// The raw bytes a peer could forge a line or drive a terminal with.
std::string RawControls(const std::string& text) {
  std::string found;
  if (Contains(text, "\x1b")) found += " ESC";
  if (Contains(text, "\r")) found += " CR";
  if (Contains(text, std::string(1, '\0'))) found += " NUL";
  return found;
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
  EXPECT_EQ(lines.size(), messages.size()) << run.out;
  lines.resize(messages.size());
  return lines;
}

class PeerWordsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::signal(SIGPIPE, SIG_IGN);
    root_ = MakeTempDir("peer-words");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    a_ = root_ + "/a";
    b_ = root_ + "/b";
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws).ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    RunResult init = RunCapsule({"init", a_ + "/agent-1", "--id", "agent-1", "--name", "Agent", "--workspace", ws});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  RunResult Move(const std::string& to) {
    return RunCapsule({"move", a_ + "/agent-1", "--to", to, "--cert", pki_ + "/client.pem", "--key",
                       pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
  }

  std::string root_, pki_, seal_, a_, b_;
};

const char kGoodMove[] = "0123456789abcdef0123456789abcdef";

TEST_F(PeerWordsTest, SidecarRefusesIdsThatAreNotOnesAndLogsThemEscaped) {
  const std::string log = root_ + "/b.log";
  Sidecar sidecar(b_, pki_, seal_, {}, log);
  const std::string good = kGoodMove;
  const std::vector<std::string> replies = Peer(
      sidecar.address(), pki_,
      {R"({"agent":"agent-1","call":"offer","epoch":1,"move":"zz"})",
       R"({"agent":"agent-1","call":"offer","epoch":1,"move":"\u001b[31m\r\u0000x"})",
       R"({"agent":"../../evil","call":"offer","epoch":1,"move":")" + good + R"("})",
       R"({"agent":"a\u001b]0;pwned\u0007\r\u0000b","call":"offer","epoch":1,"move":")" + good + R"("})",
       R"({"agent":"agent-1","call":"query","move":"0123456789ABCDEF0123456789ABCDEF"})",
       R"({"agent":"agent-1","call":"activate","epoch":1,"move":"0123456789abcdef0123456789abcde"})"});
  const std::string move_why = "must be 32 lowercase hex digits (128 random bits)";
  const std::string agent_why = "not an agent id (1 to 128 letters, digits, '.', '_' or '-', not starting with '.')";
  for (size_t i : {0, 1, 4, 5}) {
    EXPECT_TRUE(Contains(replies[i], R"("code":"InvalidArgument")") && Contains(replies[i], move_why)) << replies[i];
  }
  EXPECT_TRUE(Contains(replies[0], R"(move id \"zz\": )" + move_why)) << replies[0];
  for (size_t i : {2, 3}) {
    EXPECT_TRUE(Contains(replies[i], R"("code":"InvalidArgument")") && Contains(replies[i], agent_why)) << replies[i];
  }
  EXPECT_TRUE(Contains(replies[2], R"(agent id \"../../evil\": )" + agent_why)) << replies[2];

  // One line for each call, each on a line of its own, nothing raw.
  std::string text;
  ASSERT_TRUE(WaitUntil(
      [&] {
        Result<std::string> read = ReadFile(log);
        text = read.ok() ? *read : "";
        return CountOf(text, " serve: refused ") >= 6;
      },
      10))
      << text;
  EXPECT_EQ(RawControls(text), "") << text;
  EXPECT_EQ(CountOf(text, " serve: refused offer "), 4u) << text;
  EXPECT_EQ(CountOf(text, "\n"), CountOf(text, " serve: ")) << "every line a log line: " << text;
  EXPECT_TRUE(Contains(text, R"( move="\u001b[31m\r\u0000x" )")) << text;
  EXPECT_TRUE(Contains(text, R"(refused offer agent="a\u001b]0;pwned\u0007\r\u0000b" move=)" + good)) << text;

  // Nothing was staged for any of them, and the status has no move in flight.
  std::vector<std::string> others;
  Result<std::vector<std::string>> staged = ListFileNames(b_ + "/.staging", &others);
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(staged->empty() && others.empty());
  RunResult status = RunCapsule({"sidecar", "status", "--root", b_});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(Contains(status.out, "moves in flight: 0\n")) << status.out;
  EXPECT_EQ(RawControls(status.out), "");
}

// A stream whose manifest names an agent `capsule init` would refuse: refused whole, nothing
// placed, neither at DIR nor where the id points.
TEST_F(PeerWordsTest, StreamUnpackRefusesAnAgentIdThatIsNotOne) {
  RunResult pack = RunCapsule({"stream", "pack", a_ + "/agent-1", "--phase", "copy", "-o", root_ + "/copy.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  std::string stream = *ReadFile(root_ + "/copy.tar");
  StringSource source(stream);
  TarReader reader(&source);
  StringSink sink;
  TarWriter writer(&sink);
  TarEntry entry;
  while (*reader.Next(&entry)) {
    ASSERT_TRUE(entry.type == TarEntry::Type::kFile || entry.type == TarEntry::Type::kDirectory) << entry.path;
    if (entry.type == TarEntry::Type::kDirectory) {
      ASSERT_TRUE(writer.AddDirectory(entry.path, entry.mode, entry.pax).ok());
      continue;
    }
    std::string data(entry.size, '\0');
    if (entry.size > 0) {
      ASSERT_EQ(*reader.ReadData(data.data(), data.size()), data.size());
    }
    if (entry.path == "lnk-move-4.json") {
      const size_t at = data.find(R"("id":"agent-1")");
      ASSERT_NE(at, std::string::npos) << data;
      data.replace(at, 14, R"("id":"../../evil")");
      entry.pax["LNK.sha256"] = Sha256Hex(data);
    }
    ASSERT_TRUE(writer.AddFile(entry.path, data, entry.mode, entry.pax).ok());
  }
  ASSERT_TRUE(writer.Finish().ok());
  ASSERT_TRUE(WriteFileAtomic(root_ + "/evil.tar", sink.data()).ok());
  const std::string dst = root_ + "/in/deep/dst";
  ASSERT_TRUE(MakeDirectories(root_ + "/in/deep").ok());
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/evil.tar", dst});
  EXPECT_EQ(unpack.exit_code, 1) << unpack.out;
  EXPECT_TRUE(Contains(unpack.err, R"(lnk-move-4.json: agent.id "../../evil" is not an agent id (1 to 128 letters)"))
      << unpack.err;
  EXPECT_FALSE(PathExists(dst));
  EXPECT_FALSE(PathExists(root_ + "/evil"));

  RunResult bad_move = RunCapsule({"stream", "pack", a_ + "/agent-1", "--phase", "copy", "--move", "zz", "-o",
                                   root_ + "/zz.tar"});
  EXPECT_EQ(bad_move.exit_code, 1);
  EXPECT_TRUE(Contains(bad_move.err, R"(move id "zz": must be 32 lowercase hex digits)")) << bad_move.err;
  EXPECT_FALSE(PathExists(root_ + "/zz.tar"));
}

// A target's error reaches the source's standard error with its control characters escaped,
// and the source keeps the agent.
TEST_F(PeerWordsTest, SourcePrintsATargetsErrorEscaped) {
  testing::FakeTarget target(pki_, "refuse", R"("\u001b[2J\r\u0000forged line\u009b")", root_ + "/fake.log");
  RunResult moved = Move(target.address());
  EXPECT_EQ(moved.exit_code, 1) << moved.out;
  EXPECT_EQ(RawControls(moved.err), "") << moved.err;
  EXPECT_TRUE(Contains(moved.err, R"(\x1b[2J\x0d\x00forged line\xc2\x9b)")) << moved.err;
  Result<HolderRecord> record = HolderRecord::Load(a_ + "/agent-1");
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, HolderState::kActive);
}

// Epochs are bounded (2^53-1): an offer past the bound is refused saying so and blocks no later
// move; the status shows the epoch taken; an agent at the bound is not offered at all.
TEST_F(PeerWordsTest, EpochsPastTheBoundAreRefused) {
  Sidecar sidecar(b_, pki_, seal_, {}, root_ + "/b.log");
  const std::string good = kGoodMove;
  auto offer = [&](const std::string& epoch) {
    return R"({"agent":"agent-1","call":"offer","epoch":)" + epoch + R"(,"move":")" + good + R"("})";
  };
  const std::vector<std::string> replies =
      Peer(sidecar.address(), pki_, {offer("18446744073709551615"), offer("9007199254740992"), offer("0"), offer("2")});
  EXPECT_TRUE(Contains(replies[0], "epoch 18446744073709551615: an epoch is a whole number from 1 to 2^53-1 "
                                   "(9007199254740991)"))
      << replies[0];
  EXPECT_TRUE(Contains(replies[1], "epoch 9007199254740992: an epoch is a whole number from 1 to 2^53-1")) << replies[1];
  EXPECT_TRUE(Contains(replies[2], "epoch 0: an epoch is a whole number")) << replies[2];
  EXPECT_TRUE(Contains(replies[3], R"("ok":true)")) << "a refused offer blocks no later one: " << replies[3];
  RunResult status = RunCapsule({"sidecar", "status", "--root", b_});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_TRUE(Contains(status.out, "moves in flight: 1\n")) << status.out;
  EXPECT_TRUE(Contains(status.out, "\tepoch 2\toffered")) << status.out;
  EXPECT_FALSE(Contains(status.out, "epoch -")) << status.out;
  RunResult json = RunCapsule({"sidecar", "status", "--root", b_, "--json"});
  EXPECT_TRUE(Contains(json.out, R"("epoch":2)")) << json.out;

  // The source at the bound: refused before anything is offered, and still active.
  HolderRecord record = *HolderRecord::Load(a_ + "/agent-1");
  record.epoch = 9007199254740991u;
  ASSERT_TRUE(record.Save(a_ + "/agent-1").ok());
  RunResult moved = Move(sidecar.address());
  EXPECT_EQ(moved.exit_code, 1);
  EXPECT_TRUE(Contains(moved.err, "is at epoch 9007199254740991, the largest a move may take it to (2^53-1); it "
                                  "cannot move again"))
      << moved.err;
  EXPECT_EQ(HolderRecord::Load(a_ + "/agent-1")->state, HolderState::kActive);
}

}  // namespace
}  // namespace capsule
