// A move's target builds the agent's sandbox before the move can activate: two real
// processes (`capsule move` as the source, `capsule serve --sandbox-cache` as the target) over
// TLS on loopback, with certificates from tests/make_pki.sh.
//
// The target shares the suite's one sandbox cache with //tests:sandbox_e2e_test
// ($CAPSULE_TEST_SANDBOX_CACHE, default /var/tmp/capsule-test-sandboxes): debian:12 with hello
// (and keyutils and mount, which tests/sandbox_escape_test.cc attacks with: one sandbox for all).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/sidecar_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;

constexpr char kHelloSpec[] = R"({"env":{},"image":"debian:12","packages":["hello","keyutils","mount"],"secrets":[]})";

std::string SharedCache() {
  const char* set = std::getenv("CAPSULE_TEST_SANDBOX_CACHE");
  return set != nullptr && *set ? set : "/var/tmp/capsule-test-sandboxes";
}


std::string StateOf(const std::string& dir) {
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (!record.ok()) return PathExists(dir) ? "none" : "absent";
  return std::string(HolderStateName(record->state)) + "@" + std::to_string(record->epoch);
}

class SandboxMoveE2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("sandbox-move");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    agent_ = "sbx-move-" + std::to_string(::getpid()) + "-" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name();
    src_ = root_ + "/a/" + agent_;
    dst_ = root_ + "/b/" + agent_;
    ASSERT_EQ(RunCapsule({"init", src_, "--id", agent_, "--name", "Agent"}).exit_code, 0);
  }

  void WriteSpec(const std::string& spec) {
    std::string mnt = MakeTempDir("specmnt");
    testing::Mount mount(src_, mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(testing::Put(mnt + "/environment/spec.json", spec), 0);
    ASSERT_EQ(testing::Put(mnt + "/files/notes.txt", "work in progress\n"), 0);
    ASSERT_EQ(mount.Unmount(), 0);
  }

  testing::RunResult Move(const std::string& to) {
    return RunCapsule({"move", src_, "--to", to, "--cert", pki_ + "/client.pem", "--key", pki_ + "/client.key", "--ca",
                       pki_ + "/ca.pem", "--json"});
  }

  std::string root_, pki_, seal_, agent_, src_, dst_;
};

TEST_F(SandboxMoveE2eTest, ATargetThatCannotBuildTheSandboxRefusesBeforeThePointOfNoReturn) {
  WriteSpec(R"({"env":{},"image":"debian:12","packages":["capsule-no-such-package"],"secrets":[]})");
  std::string log = root_ + "/sidecar.log";
  Sidecar target(root_ + "/b", pki_, seal_, {"--sandbox-cache", SharedCache()}, log);
  testing::RunResult move = Move(target.address());
  EXPECT_EQ(move.exit_code, 1) << move.out << move.err;
  EXPECT_NE(move.err.find("capsule-no-such-package"), std::string::npos) << move.err;
  EXPECT_NE(move.err.find("cannot build the agent's sandbox"), std::string::npos) << move.err;
  // Rolled back: the source holds the agent, active at its old epoch; the target nothing.
  EXPECT_EQ(StateOf(src_), "active@1");
  EXPECT_EQ(StateOf(dst_), "absent");
  Result<std::vector<TreeEntry>> staged = ListTree(root_ + "/b/.staging");
  ASSERT_TRUE(staged.ok());
  EXPECT_TRUE(staged->empty());
  EXPECT_EQ(RunCapsule({"verify", src_}).exit_code, 0);
  // The source still runs: a write through a mount of it goes on.
  EXPECT_EQ(RunCapsule({"exec", "--no-sandbox", src_, "--", "sh", "-c", "echo still here >> notes.txt"}).exit_code, 0);
}

TEST_F(SandboxMoveE2eTest, AWarmCacheAddsNoSandboxTimeToTheFrozenTime) {
  WriteSpec(kHelloSpec);
  // The cache is warm: this agent's sandbox (the suite's one) is built, or found, here.
  testing::RunResult warm = RunCapsule({"sandbox", "build", src_, "--cache", SharedCache(), "--json"});
  ASSERT_EQ(warm.exit_code, 0) << warm.err;
  std::string digest = Json::parse(warm.out)["digest"];
  std::string log = root_ + "/sidecar.log";
  {
    Sidecar target(root_ + "/b", pki_, seal_, {"--sandbox-cache", SharedCache()}, log);
    testing::RunResult move = Move(target.address());
    ASSERT_EQ(move.exit_code, 0) << move.out << move.err;
    Json report = Json::parse(move.out);
    double frozen = report["frozen_seconds"].get<double>();
    std::cerr << "frozen " << frozen * 1000 << " ms with a warm sandbox cache\n";
    EXPECT_LT(frozen, 2.0) << "a sandbox lookup costs milliseconds; a build tens of seconds";
  }
  EXPECT_EQ(StateOf(dst_), "active@2");
  EXPECT_EQ(StateOf(src_), "retired@1");
  // Nothing was built: the target found it in its cache.
  Result<std::string> said = ReadFile(log);
  ASSERT_TRUE(said.ok());
  EXPECT_EQ(said->find("built sandbox"), std::string::npos) << *said;
  // And the agent runs there, in it.
  ::setenv("CAPSULE_SANDBOX_CACHE", SharedCache().c_str(), 1);
  testing::RunResult hello = RunCapsule({"exec", dst_, "--", "sh", "-c", "hello && cat notes.txt"});
  EXPECT_EQ(hello.exit_code, 0) << hello.err;
  EXPECT_EQ(hello.out, "Hello, world!\nwork in progress\n");
  EXPECT_EQ(RunCapsule({"verify", dst_}).exit_code, 0);
}

}  // namespace
}  // namespace capsule
