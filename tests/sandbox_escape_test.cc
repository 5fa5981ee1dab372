// A sandboxed agent tries to get out, through the real `capsule exec` run as root: its
// capabilities, the host's keyrings (where every agent's secrets are), a read-only bind
// remounted read-write, a namespace of its own, the host's device nodes. Each attack is made
// with the real tool (keyctl, mount, unshare, chmod) inside the sandbox, and shown to fail by
// its exit status, its error and the state of the host afterwards. What the command writes in
// /workspace still lands in the capsule, the mount's user's as before.
//
// The sandbox (debian:12 with hello, keyutils and mount) is built once in the cache the
// sandbox suites share ($CAPSULE_TEST_SANDBOX_CACHE, default /var/tmp/capsule-test-sandboxes).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule::testing {
namespace {

constexpr char kToolsSpec[] =
    R"({"env":{},"image":"debian:12","packages":["hello","keyutils","mount"],"secrets":["API_KEY"]})";

std::string SharedCache() {
  const char* set = std::getenv("CAPSULE_TEST_SANDBOX_CACHE");
  return set != nullptr && *set ? set : "/var/tmp/capsule-test-sandboxes";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// The value of a "Name:\tvalue" line of a /proc/PID/status text.
std::string StatusField(const std::string& status, const std::string& name) {
  size_t at = status.find("\n" + name + ":");
  if (at == std::string::npos) return "";
  size_t start = status.find_first_not_of(" \t", at + name.size() + 2);
  return status.substr(start, status.find('\n', start) - start);
}

// Each line "NAME=VALUE" of a script's output, by name (the exit statuses the script echoes).
std::string Echoed(const std::string& out, const std::string& name) {
  size_t at = out.find(name + "=");
  while (at != std::string::npos && at != 0 && out[at - 1] != '\n') at = out.find(name + "=", at + 1);
  if (at == std::string::npos) return "";
  size_t start = at + name.size() + 1;
  return out.substr(start, out.find('\n', start) - start);
}

class SandboxEscapeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ::setenv("CAPSULE_SANDBOX_CACHE", SharedCache().c_str(), 1); }

  void SetUp() override {
    // Root outside, with every capability: what the sandbox must take away.
    ASSERT_EQ(::geteuid(), 0u) << "the attacks are a root's run's; run as root";
    ASSERT_NE(StatusField(Slurp("/proc/self/status"), "CapEff"), "0000000000000000");
    root_ = MakeTempDir("escape");
    agent_ = std::string("esc-") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
             std::to_string(::getpid());
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", agent_, "--name", "Escaper"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    std::string mnt = MakeTempDir("specmnt");
    {
      Mount mount(cap_, mnt);
      ASSERT_TRUE(mount.up());
      ASSERT_EQ(Put(mnt + "/environment/spec.json", kToolsSpec), 0);
      ASSERT_EQ(mount.Unmount(), 0);
    }
    ASSERT_EQ(RunCapsule({"secret", "set", agent_, "API_KEY"}, secret_).exit_code, 0);
    RunResult built = RunCapsule({"sandbox", "build", cap_, "--json"});
    ASSERT_EQ(built.exit_code, 0) << built.err;
    rootfs_ = Json::parse(built.out)["rootfs"].get<std::string>();
  }
  void TearDown() override {
    for (const std::string& agent : {agent_, agent_ + "-other"}) {
      RunResult names = RunCapsule({"secret", "ls", agent});
      std::istringstream lines(names.out);
      for (std::string name; std::getline(lines, name);) (void)RunCapsule({"secret", "rm", agent, name});
    }
  }

  RunResult Exec(const std::string& script) { return RunCapsule({"exec", cap_, "--", "sh", "-c", script}); }

  std::string root_, agent_, cap_, rootfs_;
  const std::string secret_ = "sk-escape-" + std::to_string(::getpid()) + "-5d41402abc4b2a76";
};

TEST_F(SandboxEscapeTest, TheCommandHasNoCapabilityAndIsNotRoot) {
  RunResult run = Exec("cat /proc/self/status; echo uid=$(id -u); echo gid=$(id -g)");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::string status = "\n" + run.out;
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(StatusField(status, set), "0000000000000000") << set << "\n" << run.out;
  }
  EXPECT_EQ(StatusField(status, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusField(status, "Seccomp"), "2");  // a filter
  EXPECT_EQ(Echoed(run.out, "uid"), "1000");
  EXPECT_EQ(Echoed(run.out, "gid"), "1000");
}

TEST_F(SandboxEscapeTest, TheHostsKeyringsAreOutOfReach) {
  // root's user keyring holds the agent's secret, another agent's, and a key of its own.
  ASSERT_EQ(RunCapsule({"secret", "set", agent_ + "-other", "OTHER_TOKEN"}, "other-" + secret_).exit_code, 0);
  const std::string plain = "plain-" + std::to_string(::getpid());
  RunResult added = RunProgram("keyctl", {"add", "user", plain, "plain-value-" + secret_, "@u"});
  ASSERT_EQ(added.exit_code, 0) << added.err;
  std::string plain_id = added.out.substr(0, added.out.find('\n'));
  RunResult found = RunProgram("keyctl", {"search", "@u", "user", "capsule:" + agent_ + ":API_KEY"});
  ASSERT_EQ(found.exit_code, 0) << found.err;
  std::string secret_id = found.out.substr(0, found.out.find('\n'));
  ASSERT_EQ(RunProgram("keyctl", {"print", secret_id}).out, secret_ + "\n");  // root reads it, outside

  RunResult run = Exec(
      "keyctl show @u; echo show_u=$?; keyctl show @s; echo show_s=$?; keyctl print " + secret_id +
      "; echo print_secret=$?; keyctl print " + plain_id + "; echo print_plain=$?; keyctl unlink " + plain_id +
      " @u; echo unlink=$?; keyctl add user " + plain + " replaced @u; echo add=$?; echo keys=$(wc -c < /proc/keys); "
      "echo key_users=$(wc -c < /proc/key-users); cat /proc/keys; env");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* attack : {"show_u", "show_s", "print_secret", "print_plain", "unlink", "add"}) {
    EXPECT_NE(Echoed(run.out, attack), "0") << attack << "\n" << run.out << run.err;
    EXPECT_NE(Echoed(run.out, attack), "") << attack << "\n" << run.out;
  }
  EXPECT_NE(run.err.find("Operation not permitted"), std::string::npos) << run.err;  // the filter's EPERM
  EXPECT_EQ(Echoed(run.out, "keys"), "0");
  EXPECT_EQ(Echoed(run.out, "key_users"), "0");
  for (const std::string& name : {plain, std::string("capsule:"), std::string("OTHER_TOKEN"), std::string("plain-value")}) {
    EXPECT_EQ(run.out.find(name), std::string::npos) << name << " seen inside:\n" << run.out;
    EXPECT_EQ(run.err.find(name), std::string::npos) << name << " seen inside:\n" << run.err;
  }
  // The one secret the spec names is in its environment, and no other.
  EXPECT_NE(run.out.find("\nAPI_KEY=" + secret_ + "\n"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("other-" + secret_), std::string::npos);
  // The host's keys are as they were.
  EXPECT_EQ(RunProgram("keyctl", {"print", plain_id}).out, "plain-value-" + secret_ + "\n");
  EXPECT_EQ(RunProgram("keyctl", {"print", secret_id}).out, secret_ + "\n");
  (void)RunProgram("keyctl", {"unlink", plain_id, "@u"});
}

TEST_F(SandboxEscapeTest, AReadOnlyBindStaysReadOnly) {
  // The root file system is the shared cache's, bound read-only: remounting it read-write
  // would write into every sandbox of that spec on the host.
  const std::string host_file = rootfs_ + "/etc/debian_version";
  const std::string before = Slurp(host_file);
  ASSERT_FALSE(before.empty());
  const std::string planted = "/etc/capsule-escape-" + std::to_string(::getpid());
  RunResult run = Exec(
      "mount -o remount,bind,rw /; echo remount_bind=$?; mount -o remount,rw /; echo remount=$?; "
      "echo tampered > /etc/debian_version; echo write=$?; touch " + planted + "; echo plant=$?; "
      "mount -t tmpfs none /mnt; echo tmpfs=$?; umount /proc; echo umount=$?; chmod 600 /dev/null; echo chmod_null=$?; "
      "echo alive > /dev/null; echo null=$?");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* attack : {"remount_bind", "remount", "write", "plant", "tmpfs", "umount", "chmod_null"}) {
    EXPECT_NE(Echoed(run.out, attack), "0") << attack << "\n" << run.out << run.err;
    EXPECT_NE(Echoed(run.out, attack), "") << attack << "\n" << run.out;
  }
  EXPECT_NE(run.err.find("Read-only file system"), std::string::npos) << run.err;
  EXPECT_EQ(Echoed(run.out, "null"), "0");  // its /dev/null works, and is not the host's to change
  EXPECT_EQ(Slurp(host_file), before);
  EXPECT_FALSE(PathExists(rootfs_ + planted));
  struct stat null_device {};
  ASSERT_EQ(::stat("/dev/null", &null_device), 0);
  EXPECT_EQ(null_device.st_mode & 07777, 0666u);
  EXPECT_EQ(null_device.st_uid, 0u);
}

TEST_F(SandboxEscapeTest, NoNamespaceOfItsOwn) {
  RunResult run = Exec(
      "unshare -r true; echo user=$?; unshare -m true; echo mount=$?; unshare -n true; echo net=$?; "
      "unshare -p -f true; echo pid=$?");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  for (const char* attack : {"user", "mount", "net", "pid"}) {
    EXPECT_NE(Echoed(run.out, attack), "0") << attack << "\n" << run.out << run.err;
    EXPECT_NE(Echoed(run.out, attack), "") << attack << "\n" << run.out;
  }
  EXPECT_NE(run.err.find("unshare failed: Operation not permitted"), std::string::npos) << run.err;
}

TEST_F(SandboxEscapeTest, WhatItWritesLandsInTheCapsuleAsTheMountsUsers) {
  RunResult run = Exec(
      "echo written > new.txt && mkdir -p sub && echo deep > sub/file && chmod 600 sub/file && "
      "echo private > /tmp/t && cat /tmp/t && stat -c '%u:%g %a' new.txt sub/file");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "private\n1000:1000 644\n1000:1000 600\n");  // its own, as it sees them
  // On the host, through a mount: the mount's user's (the driver's, root), as any write of
  // root's through the mount; the folder verifies.
  std::string mnt = MakeTempDir("look");
  Mount mount(cap_, mnt);
  ASSERT_TRUE(mount.up());
  struct stat st {};
  ASSERT_EQ(::stat((mnt + "/files/new.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_gid, 0u);
  ASSERT_EQ(::stat((mnt + "/files/sub/file").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 0u);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(Slurp(mnt + "/files/new.txt"), "written\n");
  EXPECT_EQ(Slurp(mnt + "/files/sub/file"), "deep\n");
  EXPECT_EQ(mount.Unmount(), 0);
  RunResult verify = RunCapsule({"verify", cap_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

}  // namespace
}  // namespace capsule::testing
