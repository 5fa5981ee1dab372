// A target that takes a move up to activate, loses activate's reply and then never answers a
// query (tests/fake_target.py never-answers), through the real `capsule move`: the source
// asks --query-tries times, each query given --query-timeout seconds, saying on standard
// error at each try that the agent stays frozen and why, then exits 1 with the agent frozen
// and the move recorded for capsule move --recover. Not the 300 seconds of a silent link per
// try it once waited.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/fake_target_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunResult;

size_t CountOf(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(QueryWaitTest, ATargetThatNeverAnswersTheQueryHoldsTheSourceForTheTriesOnly) {
  ::signal(SIGPIPE, SIG_IGN);
  const std::string root = MakeTempDir("query-wait");
  const std::string pki = root + "/pki";
  ASSERT_TRUE(testing::MakeMoveKeys(pki, root + "/seal.key"));
  RunResult keygen = RunCapsule({"keygen", "--type", "x25519", "-o", root + "/target.key"});
  ASSERT_EQ(keygen.exit_code, 0) << keygen.err;
  std::string seal_hex = keygen.out.substr(0, keygen.out.find('\n'));
  const std::string ws = root + "/ws", source = root + "/a/agent-1";
  ASSERT_TRUE(MakeDirectories(ws).ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
  ASSERT_EQ(RunCapsule({"init", source, "--id", "agent-1", "--name", "Agent", "--workspace", ws}).exit_code, 0);

  testing::FakeTarget target(pki, "never-answers", seal_hex, root + "/fake.log");
  const auto start = std::chrono::steady_clock::now();
  RunResult moved = RunCapsule({"move", source, "--to", target.address(), "--cert", pki + "/client.pem", "--key",
                                pki + "/client.key", "--ca", pki + "/ca.pem", "--query-tries", "3",
                                "--query-timeout", "1"});
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(moved.exit_code, 1) << moved.out;
  // Three tries of at most a second each, half a second apart, after a copy and a switch of a
  // few files: far below one silent link's 300 seconds.
  EXPECT_LT(seconds, 30) << moved.err;
  const std::string asking = "; asking " + target.address() + " which epoch it holds of agent agent-1, try ";
  EXPECT_EQ(CountOf(moved.err, asking), 3u) << moved.err;
  EXPECT_NE(moved.err.find(": activate's reply was lost ("), std::string::npos) << moved.err;
  EXPECT_NE(moved.err.find(asking + "3 of 3 ("), std::string::npos) << moved.err;
  EXPECT_EQ(CountOf(moved.err, "; the agent stays frozen here until it answers\n"), 3u) << moved.err;
  EXPECT_NE(moved.err.find("the target cannot say whether it took over ("), std::string::npos) << moved.err;
  EXPECT_NE(moved.err.find("); the agent stays frozen here until it can"), std::string::npos) << moved.err;

  // Frozen, the move recorded for --recover; the target was asked three times.
  Result<HolderRecord> record = HolderRecord::Load(source);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, HolderState::kFrozen);
  Result<std::string> left = ReadFile(source + "/.capsule/move-out.json");
  ASSERT_TRUE(left.ok());
  EXPECT_NE(left->find("\"phase\":\"activate-sent\""), std::string::npos) << *left;
  Result<std::string> log = ReadFile(root + "/fake.log");
  ASSERT_TRUE(log.ok());
  EXPECT_EQ(CountOf(*log, "call query\n"), 3u) << *log;
  EXPECT_EQ(CountOf(*log, "call activate\n"), 1u) << *log;
}

}  // namespace
}  // namespace capsule
