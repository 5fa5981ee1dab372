// The sandbox's parts that need neither a mirror nor bubblewrap: the spec's fields and its
// digest, the keychain (the real kernel keyring), and bubblewrap's argument list.
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/base/temp_dir.h"
#include "sandbox/keychain.h"
#include "sandbox/process.h"
#include "sandbox/sandbox_cache.h"
#include "sandbox/sandbox_run.h"
#include "sandbox/sandbox_spec.h"
#include "sandbox/seccomp_filter.h"

namespace capsule::sandbox {
namespace {

TEST(SandboxSpecTest, ReadsEveryField) {
  Result<SandboxSpec> spec = SandboxSpec::Parse(
      R"({"env":{"GREETING":"hi"},"image":"debian:12","network":true,"packages":["python3","hello","hello"],"secrets":["OPENAI_API_KEY"]})");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->image, "debian:12");
  EXPECT_EQ(spec->packages, (std::vector<std::string>{"hello", "python3"}));
  EXPECT_EQ(spec->env.at("GREETING"), "hi");
  EXPECT_EQ(spec->secrets, std::vector<std::string>{"OPENAI_API_KEY"});
  EXPECT_TRUE(spec->network);
  EXPECT_EQ(*spec->Suite(), "bookworm");
}

TEST(SandboxSpecTest, DefaultsAndRefusals) {
  Result<SandboxSpec> empty = SandboxSpec::Parse("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->image, "debian:12");
  EXPECT_FALSE(empty->network);
  // The check every spec passes stays: a secret value is refused, naming the variable.
  Result<SandboxSpec> token = SandboxSpec::Parse(R"({"env":{"TOKEN":"x"}})");
  EXPECT_EQ(token.status().code(), Code::kInvalidArgument);
  EXPECT_NE(token.status().message().find("TOKEN"), std::string::npos);
  EXPECT_NE(SandboxSpec::Parse(R"({"packages":["Bad Name"]})").status().message().find("Bad Name"), std::string::npos);
  EXPECT_NE(SandboxSpec::Parse(R"({"network":"yes"})").status().message().find("network"), std::string::npos);
  Result<SandboxSpec> alpine = SandboxSpec::Parse(R"({"image":"alpine:3"})");
  ASSERT_TRUE(alpine.ok());
  EXPECT_NE(alpine->Suite().status().message().find("alpine:3"), std::string::npos);
}

TEST(SandboxSpecTest, DigestFollowsImageAndPackagesOnly) {
  SandboxSpec a = *SandboxSpec::Parse(R"({"image":"debian:12","packages":["hello","python3"]})");
  SandboxSpec b = *SandboxSpec::Parse(
      R"({"env":{"X":"1"},"image":"debian:bookworm","network":true,"packages":["python3","hello"],"secrets":["S"]})");
  SandboxSpec c = *SandboxSpec::Parse(R"({"image":"debian:12","packages":["hello"]})");
  EXPECT_EQ(a.Digest(), b.Digest());
  EXPECT_NE(a.Digest(), c.Digest());
  EXPECT_EQ(a.Digest().size(), 64u);
}

TEST(KeychainTest, SetGetListRemoveInTheKernelKeyring) {
  std::string agent = "keychain-test-" + std::to_string(::getpid());
  ASSERT_TRUE(SetSecret(agent, "API_TOKEN", "first value").ok());
  ASSERT_TRUE(SetSecret(agent, "API_TOKEN", "s3cr3t\nvalue").ok());  // replaced
  ASSERT_TRUE(SetSecret(agent, "OTHER", "x").ok());
  EXPECT_EQ(*GetSecret(agent, "API_TOKEN"), "s3cr3t\nvalue");
  EXPECT_EQ(*ListSecrets(agent), (std::vector<std::string>{"API_TOKEN", "OTHER"}));
  EXPECT_TRUE(ListSecrets(agent + "-x")->empty());  // another agent sees none of them
  ASSERT_TRUE(RemoveSecret(agent, "API_TOKEN").ok());
  ASSERT_TRUE(RemoveSecret(agent, "OTHER").ok());
  Result<std::string> gone = GetSecret(agent, "API_TOKEN");
  EXPECT_EQ(gone.status().code(), Code::kNotFound);
  EXPECT_NE(gone.status().message().find("API_TOKEN"), std::string::npos);
  EXPECT_EQ(RemoveSecret(agent, "API_TOKEN").code(), Code::kNotFound);
}

TEST(SandboxRunTest, NoVariableIsInBubblewrapsArguments) {
  RunRequest request;
  request.command = {"env"};
  request.workspace = "/mnt/files";
  request.rootfs = "/cache/x/rootfs";
  request.env = {{"API_TOKEN", "very-secret-value"}};
  std::vector<std::string> args = BubblewrapArguments(request);
  for (const std::string& arg : args) EXPECT_EQ(arg.find("very-secret"), std::string::npos) << arg;
  EXPECT_NE(std::find(args.begin(), args.end(), "--unshare-all"), args.end());
  EXPECT_EQ(std::find(args.begin(), args.end(), "--share-net"), args.end());
  request.network = true;
  args = BubblewrapArguments(request);
  EXPECT_NE(std::find(args.begin(), args.end(), "--share-net"), args.end());
}

TEST(SandboxRunTest, TheCommandRunsWithoutCapabilitiesUnderTheFilter) {
  RunRequest request;
  request.command = {"id"};
  request.workspace = "/mnt/files";
  request.rootfs = "/cache/x/rootfs";
  request.devices = "/cache/.dev";
  std::vector<std::string> args = BubblewrapArguments(request, 9);
  auto follows = [&](const std::string& option, const std::string& value) {
    auto at = std::find(args.begin(), args.end(), option);
    return at != args.end() && at + 1 != args.end() && at[1] == value;
  };
  EXPECT_TRUE(follows("--cap-drop", "ALL"));
  EXPECT_TRUE(follows("--uid", "1000"));
  EXPECT_TRUE(follows("--gid", "1000"));
  EXPECT_TRUE(follows("--seccomp", "9"));
  EXPECT_TRUE(follows("--dev-bind", "/cache/.dev/null"));
  for (const char* option : {"--unshare-user", "--disable-userns", "--new-session", "--die-with-parent"}) {
    EXPECT_NE(std::find(args.begin(), args.end(), option), args.end()) << option;
  }
  // The seccomp program comes last of the options: bwrap loads it right before the command.
  EXPECT_EQ(*(std::find(args.begin(), args.end(), "--") - 2), "--seccomp");
}

// What a child process gets from each call once the filter is loaded: the call's result, or
// 1000 + the signal that ended it.
class FilteredChild {
 public:
  template <typename Call>
  static int Run(Call call) {
    Result<UniqueFd> program = SandboxSeccompProgram();
    if (!program.ok()) return -1;
    std::string bytes(65536, '\0');
    ssize_t n = ::read(program->get(), bytes.data(), bytes.size());
    if (n <= 0 || n % sizeof(sock_filter) != 0) return -2;
    sock_fprog fprog{static_cast<unsigned short>(n / sizeof(sock_filter)), reinterpret_cast<sock_filter*>(bytes.data())};
    pid_t pid = ::fork();
    if (pid == 0) {
      if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog) != 0) {
        ::_exit(250);
      }
      long rc = call();
      ::_exit(rc == 0 ? 0 : (rc < 0 ? errno : 249));
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
  }
};

TEST(SeccompFilterTest, RefusesWhatItNamesAndAllowsTheRest) {
  // Root, before the filter: each of these would be allowed (the test proves nothing else).
  ASSERT_EQ(::geteuid(), 0u) << "run as root";
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_getpid) > 0 ? 0L : -1L; }), 0);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_mount, "none", "/tmp", "tmpfs", 0, nullptr); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_umount2, "/proc", MNT_DETACH); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_keyctl, 0 /* KEYCTL_GET_KEYRING_ID */, -4, 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_add_key, "user", "x", "y", 1, -4); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_unshare, CLONE_NEWUSER); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_setns, 0, 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_ptrace, 0 /* PTRACE_TRACEME */, 0, 0, 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_bpf, 0, nullptr, 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_fsopen, "tmpfs", 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_open_tree, -100, "/", 0); }), EPERM);
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_chroot, "/"); }), EPERM);
  // clone3 is "not implemented" (the C library falls back to clone); clone may not make a
  // namespace, of any kind, and may make a process.
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(SYS_clone3, nullptr, 0); }), ENOSYS);
  for (unsigned long flag : {CLONE_NEWUSER, CLONE_NEWNS, CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWUTS, CLONE_NEWIPC,
                             CLONE_NEWCGROUP}) {
    EXPECT_EQ(FilteredChild::Run([flag] { return ::syscall(SYS_clone, flag | SIGCHLD, nullptr, nullptr, nullptr, 0); }),
              EPERM)
        << std::hex << flag;
  }
  EXPECT_EQ(FilteredChild::Run([] {
              long pid = ::syscall(SYS_clone, SIGCHLD, nullptr, nullptr, nullptr, 0);
              if (pid == 0) ::_exit(0);
              return pid > 0 && ::waitpid(static_cast<pid_t>(pid), nullptr, 0) == pid ? 0L : -1L;
            }),
            0);
  // A call through the i386 compatibility ABI ends the process (SIGSYS).
  EXPECT_EQ(FilteredChild::Run([] {
              long rc = 20;  // getpid, in the i386 table
              asm volatile("int $0x80" : "+a"(rc) : : "memory");
              return 0L;
            }),
            1000 + SIGSYS);
  // So does one through the x32 ABI (the same architecture, its calls' numbers marked).
  EXPECT_EQ(FilteredChild::Run([] { return ::syscall(0x40000000 | SYS_getpid); }), 1000 + SIGSYS);
  for (const std::string& name : RefusedSystemCalls()) {
    EXPECT_NE(SandboxSeccompText()->find("# filter for syscall \"" + name + "\""), std::string::npos) << name;
  }
}

TEST(SandboxRunTest, HostRunGetsTheVariablesAndItsExitCode) {
  std::string dir = testing::MakeTempDir("hostrun");
  RunRequest request;
  request.workspace = dir;
  request.env = {{"CAPSULE_TEST_VAR", "from-spec"}};
  request.command = {"sh", "-c", "test \"$CAPSULE_TEST_VAR\" = from-spec && test \"$(pwd)\" = \"$PWD\" && exit 7"};
  EXPECT_EQ(*RunOnHost(request), 7);
  request.command = {"no-such-program-anywhere"};
  EXPECT_EQ(RunOnHost(request).status().code(), Code::kNotFound);
}

TEST(SandboxCacheTest, EmptyCacheListsNothingAndRemoveNamesTheDigest) {
  Result<SandboxCache> cache = SandboxCache::Open(testing::MakeTempDir("cache"));
  ASSERT_TRUE(cache.ok());
  EXPECT_TRUE(cache->List()->empty());
  EXPECT_EQ(cache->Remove("0123456789abcdef").status().code(), Code::kNotFound);
  EXPECT_EQ(cache->Remove("xyz").status().code(), Code::kInvalidArgument);
  SandboxHold hold;
  EXPECT_EQ(cache->Hold(*SandboxSpec::Parse("{}"), &hold).status().code(), Code::kNotFound);
}

TEST(MirrorTest, TheEnvironmentWins) {
  ::setenv("CAPSULE_DEBIAN_MIRROR", "http://mirror.example/debian", 1);
  EXPECT_EQ(DebianMirror(), "http://mirror.example/debian");
  ::unsetenv("CAPSULE_DEBIAN_MIRROR");
  EXPECT_NE(DebianMirror().find("://"), std::string::npos);
}

// A stand-in for mmdebstrap on PATH, so that the cache's locking, atomicity and error
// reports are tested without a mirror: it makes TARGET/usr/bin/hello after `delay` seconds,
// or fails as apt does for a package named "missing-*".
class FakeBootstrapTest : public ::testing::Test {
 protected:
  void SetUp() override {
    bin_ = testing::MakeTempDir("fakebin");
    std::string script =
        "#!/bin/sh\n"
        "n=$#; i=0; for a; do i=$((i+1)); [ $i -eq $((n-1)) ] && target=$a; done\n"
        "for a; do case $a in --include=*missing-*) echo 'E: Unable to locate package missing-thing'; exit 1;; esac; done\n"
        "sleep 1\n"
        "echo run >> " + bin_ + "/runs\n"
        "mkdir -p \"$target/usr/bin\" && echo hello > \"$target/usr/bin/hello\"\n";
    ASSERT_EQ(std::system(("cat > " + bin_ + "/mmdebstrap <<'EOF2'\n" + script + "EOF2\nchmod +x " + bin_ + "/mmdebstrap").c_str()), 0);
    old_path_ = std::getenv("PATH");
    ::setenv("PATH", (bin_ + ":" + old_path_).c_str(), 1);
  }
  void TearDown() override { ::setenv("PATH", old_path_.c_str(), 1); }
  int Runs() {
    Result<std::string> runs = ReadFile(bin_ + "/runs");
    return runs.ok() ? static_cast<int>(std::count(runs->begin(), runs->end(), '\n')) : 0;
  }
  std::string bin_, old_path_;
};

TEST_F(FakeBootstrapTest, TwoBuildsOfOneDigestAtOnceBuildItOnce) {
  Result<SandboxCache> cache = SandboxCache::Open(testing::MakeTempDir("cache"));
  ASSERT_TRUE(cache.ok());
  SandboxSpec spec = *SandboxSpec::Parse(R"({"packages":["hello"]})");
  Result<SandboxCache::Built> a = Status::NotFound("a", "not run"), b = Status::NotFound("b", "not run");
  std::thread other([&] { b = SandboxCache(*cache).Build(spec); });
  a = cache->Build(spec);
  other.join();
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  EXPECT_NE(a->cache_hit, b->cache_hit);
  EXPECT_EQ(Runs(), 1);
  EXPECT_TRUE(PathExists(a->entry.rootfs + "/usr/bin/hello"));
  EXPECT_TRUE(PathExists(a->entry.rootfs + "/workspace"));  // where a run's workspace goes
  Result<std::vector<SandboxEntry>> listed = cache->List();
  ASSERT_EQ(listed->size(), 1u);
  EXPECT_EQ(listed->front().digest, spec.Digest());
  // A run holds it: rm is refused until the hold is dropped.
  {
    SandboxHold hold;
    ASSERT_TRUE(cache->Hold(spec, &hold).ok());
    EXPECT_EQ(cache->Remove(spec.Digest().substr(0, 8)).status().code(), Code::kFailedPrecondition);
  }
  EXPECT_TRUE(cache->Remove(spec.Digest().substr(0, 8)).ok());
  EXPECT_TRUE(cache->List()->empty());
}

TEST_F(FakeBootstrapTest, AFailedBuildNamesThePackageAndLeavesNothing) {
  std::string root = testing::MakeTempDir("cache");
  Result<SandboxCache> cache = SandboxCache::Open(root);
  ASSERT_TRUE(cache.ok());
  Result<SandboxCache::Built> built = cache->Build(*SandboxSpec::Parse(R"({"packages":["missing-thing"]})"));
  ASSERT_EQ(built.status().code(), Code::kNotFound);
  EXPECT_NE(built.status().message().find("package missing-thing: not in debian:12"), std::string::npos)
      << built.status().message();
  Result<std::vector<TreeEntry>> left = ListTree(root);
  for (const TreeEntry& entry : *left) EXPECT_EQ(entry.path.rfind(".lock-", 0), 0u) << entry.path;
}

}  // namespace
}  // namespace capsule::sandbox
