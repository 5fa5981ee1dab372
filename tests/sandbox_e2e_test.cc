// capsule exec, capsule secret and capsule sandbox through the real binaries: secrets from the
// kernel keyring for one run and in no file afterwards, a sandbox built with mmdebstrap from
// the machine's Debian mirror (GNU hello, which the host lacks), a run under bubblewrap that
// writes through a capsulefs mount, sees nothing of the host and reaches no network.
//
// The sandbox is slow to build and needs the mirror: the suite builds one (debian:12 with
// hello, keyutils and mount, the tools tests/sandbox_escape_test.cc attacks with) in one cache
// shared by its tests, the other sandbox suites and later runs
// ($CAPSULE_TEST_SANDBOX_CACHE, default /var/tmp/capsule-test-sandboxes).
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule::testing {
namespace {

constexpr char kHelloSpec[] = R"({"env":{"GREETING":"hello from the spec"},"image":"debian:12","packages":["hello","keyutils","mount"],"secrets":[]})";

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

class SandboxE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { ::setenv("CAPSULE_SANDBOX_CACHE", SharedCache().c_str(), 1); }

  void SetUp() override {
    root_ = MakeTempDir("sandbox");
    agent_ = std::string("sbx-") + ::testing::UnitTest::GetInstance()->current_test_info()->name() + "-" +
             std::to_string(::getpid());
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", agent_, "--name", "Sandboxed"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void TearDown() override {
    RunResult names = RunCapsule({"secret", "ls", agent_});
    std::istringstream lines(names.out);
    for (std::string name; std::getline(lines, name);) (void)RunCapsule({"secret", "rm", agent_, name});
  }

  // Writes the environment spec through a mount, as an agent would.
  void WriteSpec(const std::string& dir, const std::string& spec) {
    std::string mnt = MakeTempDir("specmnt");
    Mount mount(dir, mnt);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt + "/environment/spec.json", spec), 0);
    ASSERT_EQ(mount.Unmount(), 0);
  }

  // The run of `sh -c script` in the capsule (in its sandbox unless `host`).
  RunResult Exec(const std::string& script, bool host = false) {
    std::vector<std::string> args = {"exec"};
    if (host) args.push_back("--no-sandbox");
    args.insert(args.end(), {cap_, "--", "sh", "-c", script});
    return RunCapsule(args);
  }

  // Every file of the capsule folder (.capsule/ and the owned-state database included) that
  // holds `needle`.
  std::vector<std::string> FilesHolding(const std::string& needle) {
    std::vector<std::string> found;
    Result<std::vector<TreeEntry>> entries = ListTree(cap_);
    EXPECT_TRUE(entries.ok());
    for (const TreeEntry& entry : *entries) {
      if (entry.type != TreeEntry::Type::kFile) continue;
      if (Slurp(cap_ + "/" + entry.path).find(needle) != std::string::npos) found.push_back(entry.path);
    }
    return found;
  }

  void Verify() {
    RunResult verify = RunCapsule({"verify", cap_});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  }

  std::string root_, agent_, cap_;
};

TEST_F(SandboxE2eTest, ASecretReachesTheRunFromTheKeyringAndNoFile) {
  const std::string value = "sk-test-" + std::to_string(::getpid()) + "-d41d8cd98f00b204";
  WriteSpec(cap_, R"({"env":{"MODE":"test"},"image":"debian:12","packages":[],"secrets":["OPENAI_API_KEY"]})");
  RunResult set = RunCapsule({"secret", "set", agent_, "OPENAI_API_KEY"}, value + "\n");
  ASSERT_EQ(set.exit_code, 0) << set.err;
  RunResult ls = RunCapsule({"secret", "ls", agent_, "--json"});
  EXPECT_EQ(ls.out, R"({"agent":")" + agent_ + R"(","secrets":["OPENAI_API_KEY"]})" + "\n");
  EXPECT_EQ(ls.out.find(value), std::string::npos);

  RunResult run = RunCapsule({"exec", "--no-sandbox", cap_, "--", "env"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("OPENAI_API_KEY=" + value + "\n"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find("MODE=test\n"), std::string::npos);
  EXPECT_NE(run.err.find("running on the host, not in a sandbox"), std::string::npos) << run.err;
  // The command may write it into its workspace, then remove it: gone from the capsule too.
  RunResult write = Exec("echo \"$OPENAI_API_KEY\" > leak.txt && rm leak.txt && echo done", true);
  ASSERT_EQ(write.exit_code, 0) << write.err;

  EXPECT_EQ(FilesHolding(value), std::vector<std::string>{}) << "the value is in a file of the capsule";
  EXPECT_FALSE(FilesHolding("OPENAI_API_KEY").empty());  // its name is: the spec, the journal
  RunResult log = RunCapsule({"log", cap_, "--json"});
  EXPECT_NE(log.out.find(R"("data":{"sandbox":"host","secrets":["OPENAI_API_KEY"]})"), std::string::npos) << log.out;
  EXPECT_NE(log.out.find(R"("type":"secrets_used")"), std::string::npos);
  RunResult sql = RunCapsule({"sql", cap_, "SELECT count(*) FROM journal_events WHERE type = 'secrets_used'"});
  EXPECT_EQ(sql.exit_code, 0) << sql.err;
  Verify();
}

TEST_F(SandboxE2eTest, ASecretMissingFromTheKeyringRefusesTheRunNamingIt) {
  WriteSpec(cap_, R"({"env":{},"image":"debian:12","packages":[],"secrets":["GITHUB_TOKEN","DB_PASSWORD"]})");
  ASSERT_EQ(RunCapsule({"secret", "set", agent_, "GITHUB_TOKEN"}, "ghp-value").exit_code, 0);
  RunResult run = Exec("touch ran.txt", true);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_NE(run.err.find("DB_PASSWORD"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("not in this machine's keychain"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("GITHUB_TOKEN "), std::string::npos) << "only the missing one is named: " << run.err;
  RunResult json = RunCapsule({"exec", "--json", cap_, "true"});
  EXPECT_NE(json.out.find(R"("code":"failed_precondition")"), std::string::npos) << json.out;
  EXPECT_TRUE(FilesHolding("ran.txt").empty());  // nothing ran
  RunResult log = RunCapsule({"log", cap_});
  EXPECT_EQ(log.out.find("secrets_used"), std::string::npos);
  // A secret value in the spec itself stays refused, by the mount, as before.
  std::string mnt = MakeTempDir("refuse");
  Mount mount(cap_, mnt);
  EXPECT_NE(Put(mnt + "/environment/spec.json", R"({"env":{"TOKEN":"abc"}})"), 0);
  EXPECT_EQ(mount.Unmount(), 0);
  Verify();
}

TEST_F(SandboxE2eTest, SecretCommandsTakeValuesOnlyFromStandardInput) {
  EXPECT_EQ(RunCapsule({"secret", "set", agent_, "NAME", "value-on-the-command-line"}).exit_code, 2);
  EXPECT_EQ(RunCapsule({"secret", "set", agent_, "NAME"}, "").exit_code, 1);
  EXPECT_EQ(RunCapsule({"secret", "set", agent_, "9BAD"}, "x").exit_code, 1);
  EXPECT_EQ(RunCapsule({"secret", "rm", agent_, "NAME"}).exit_code, 1);
  // AGENT may be the capsule folder: its agent id.
  ASSERT_EQ(RunCapsule({"secret", "set", cap_, "NAME"}, "v").exit_code, 0);
  EXPECT_EQ(RunCapsule({"secret", "ls", agent_}).out, "NAME\n");
}

// The one sandbox of the suite: built here (twice at once: the lock lets one build, the other
// finds it), or found in the shared cache from an earlier run.
TEST_F(SandboxE2eTest, BuildsOnceCachesAndRunsHelloWhichTheHostLacks) {
  ASSERT_NE(Shell("command -v hello >/dev/null 2>&1"), 0) << "this host has GNU hello: the test proves nothing";
  WriteSpec(cap_, kHelloSpec);
  RunResult first, second;
  auto started = std::chrono::steady_clock::now();
  std::thread other([&] { second = RunCapsule({"sandbox", "build", cap_, "--json"}); });
  first = RunCapsule({"sandbox", "build", cap_, "--json"});
  other.join();
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(second.exit_code, 0) << second.err;
  Json a = Json::parse(first.out), b = Json::parse(second.out);
  EXPECT_EQ(a["digest"], b["digest"]);
  EXPECT_TRUE(a["cache_hit"].get<bool>() || b["cache_hit"].get<bool>()) << "two builds of one digest";
  std::cerr << "sandbox build (two at once): " << seconds << " s\n";

  // A second build, and a second agent with the same spec: cache hits.
  RunResult again = RunCapsule({"sandbox", "build", cap_, "--json"});
  ASSERT_EQ(again.exit_code, 0);
  EXPECT_TRUE(Json::parse(again.out)["cache_hit"].get<bool>());
  std::string other_cap = root_ + "/other";
  ASSERT_EQ(RunCapsule({"init", other_cap, "--id", agent_ + "-2", "--name", "Other"}).exit_code, 0);
  WriteSpec(other_cap, kHelloSpec);
  RunResult shared = RunCapsule({"sandbox", "build", other_cap, "--json"});
  ASSERT_EQ(shared.exit_code, 0);
  EXPECT_TRUE(Json::parse(shared.out)["cache_hit"].get<bool>());
  EXPECT_EQ(Json::parse(shared.out)["digest"], a["digest"]);
  RunResult ls = RunCapsule({"sandbox", "ls", "--json"});
  EXPECT_NE(ls.out.find(a["digest"].get<std::string>()), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("\"last_used\""), std::string::npos);

  started = std::chrono::steady_clock::now();
  RunResult hello = RunCapsule({"exec", cap_, "--", "hello"});
  std::cerr << "capsule exec -- hello: "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count() << " s\n";
  EXPECT_EQ(hello.exit_code, 0) << hello.err;
  EXPECT_EQ(hello.out, "Hello, world!\n");
  EXPECT_EQ(RunCapsule({"exec", cap_, "--", "hello", "-g", "from the sandbox"}).out, "from the sandbox\n");
  EXPECT_EQ(Exec("exit 7").exit_code, 7);  // the command's status is exec's
}

TEST_F(SandboxE2eTest, TheSandboxWritesThroughTheMountAndSeesNothingOfTheHost) {
  WriteSpec(cap_, kHelloSpec);
  ASSERT_EQ(RunCapsule({"sandbox", "build", cap_}).exit_code, 0);
  std::string marker = "/root/capsule-sandbox-marker-" + std::to_string(::getpid());
  ASSERT_EQ(Shell("touch " + marker), 0);
  RunResult run = Exec(
      "echo \"$GREETING\" > made.txt && mkdir -p sub && echo deep > sub/file && pwd && echo HOME=$HOME && "
      "ls -a /root && echo interfaces $(tail -n +3 /proc/net/dev | cut -d: -f1) && env");
  (void)Shell("rm -f " + marker);
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out.rfind("/workspace\nHOME=/workspace\n", 0), 0u) << run.out;
  EXPECT_EQ(run.out.find("capsule-sandbox-marker"), std::string::npos) << "host /root is visible";
  // No network: only the loopback of a namespace of its own.
  EXPECT_NE(run.out.find("\ninterfaces lo\n"), std::string::npos) << run.out;
  // Nothing of the host's environment: exactly PATH, HOME, LANG, PWD and the spec's.
  for (const char* host_only : {"TEST_TMPDIR=", "CAPSULE_SANDBOX_CACHE=", "USER=", "TERM="}) {
    EXPECT_EQ(run.out.find(std::string("\n") + host_only), std::string::npos) << host_only;
  }
  EXPECT_NE(run.out.find("GREETING=hello from the spec\n"), std::string::npos);

  // The host's /etc is not the sandbox's: /etc/passwd inside is the image's.
  Json entry = Json::parse(RunCapsule({"sandbox", "build", cap_, "--json"}).out);
  std::string image_passwd = Slurp(entry["rootfs"].get<std::string>() + "/etc/passwd");
  RunResult passwd = RunCapsule({"exec", cap_, "--", "cat", "/etc/passwd"});
  EXPECT_EQ(passwd.out, image_passwd);
  if (Slurp("/etc/passwd") != image_passwd) {
    EXPECT_NE(passwd.out, Slurp("/etc/passwd"));
  }
  // The root file system is read-only; /tmp is the run's own.
  EXPECT_NE(Exec("touch /usr/bin/intruder").exit_code, 0);
  EXPECT_EQ(Exec("echo x > /tmp/t && cat /tmp/t").out, "x\n");

  // What it wrote is in the capsule, committed: the folder verifies and a later run sees it.
  Verify();
  EXPECT_EQ(Exec("cat made.txt sub/file").out, "hello from the spec\ndeep\n");
  EXPECT_EQ(RunCapsule({"exec", "--no-sandbox", cap_, "--", "cat", "made.txt"}).out, "hello from the spec\n");

  // Through a mount that is already up: the run works in it, and leaves it mounted.
  std::string mnt = MakeTempDir("up");
  Mount mount(cap_, mnt);
  RunResult through = RunCapsule({"exec", mnt, "--", "sh", "-c", "echo live > live.txt"});
  EXPECT_EQ(through.exit_code, 0) << through.err;
  EXPECT_EQ(Slurp(mnt + "/files/live.txt"), "live\n");
  RunResult by_folder = RunCapsule({"exec", cap_, "--", "cat", "live.txt"});  // the folder names that mount
  EXPECT_EQ(by_folder.out, "live\n") << by_folder.err;
  EXPECT_TRUE(mount.up());
  EXPECT_EQ(mount.Unmount(), 0);
  Verify();

  // A spec that allows the network: the host's interfaces are there (same sandbox).
  WriteSpec(cap_, R"({"env":{},"image":"debian:12","network":true,"packages":["hello","keyutils","mount"],"secrets":[]})");
  RunResult net = Exec("cut -d: -f1 /proc/net/dev | sort");
  EXPECT_EQ(net.exit_code, 0) << net.err;
  EXPECT_EQ(net.out, RunProgram("sh", {"-c", "cut -d: -f1 /proc/net/dev | sort"}).out);
}

TEST_F(SandboxE2eTest, ASecretReachesTheSandboxedRunOnly) {
  const std::string value = "pw-" + std::to_string(::getpid()) + "-0cc175b9c0f1b6a8";
  WriteSpec(cap_, R"({"env":{},"image":"debian:12","packages":["hello","keyutils","mount"],"secrets":["DB_PASSWORD"]})");
  ASSERT_EQ(RunCapsule({"secret", "set", agent_, "DB_PASSWORD"}, value).exit_code, 0);
  RunResult run = RunCapsule({"exec", cap_, "--", "env"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  EXPECT_NE(run.out.find("DB_PASSWORD=" + value + "\n"), std::string::npos) << run.out;
  EXPECT_TRUE(FilesHolding(value).empty());
  RunResult log = RunCapsule({"log", cap_, "--json"});
  EXPECT_NE(log.out.find(R"("secrets":["DB_PASSWORD"])"), std::string::npos);
  Verify();
}

TEST_F(SandboxE2eTest, AnUnknownPackageOrImageIsRefusedByName) {
  WriteSpec(cap_, R"({"env":{},"image":"debian:12","packages":["capsule-no-such-package"],"secrets":[]})");
  RunResult build = RunCapsule({"sandbox", "build", cap_});
  EXPECT_EQ(build.exit_code, 1);
  EXPECT_NE(build.err.find("package capsule-no-such-package: not in debian:12"), std::string::npos) << build.err;
  RunResult exec = RunCapsule({"exec", cap_, "--", "true"});
  EXPECT_EQ(exec.exit_code, 1);
  EXPECT_NE(exec.err.find("capsule-no-such-package"), std::string::npos) << exec.err;
  WriteSpec(cap_, R"({"env":{},"image":"alpine:3","packages":[],"secrets":[]})");
  RunResult alpine = RunCapsule({"sandbox", "build", cap_, "--json"});
  EXPECT_EQ(alpine.exit_code, 1);
  EXPECT_NE(alpine.out.find("image alpine:3: not supported"), std::string::npos) << alpine.out;
  // Nothing of a failed build is left in the cache.
  Result<std::vector<TreeEntry>> left = ListTree(SharedCache());
  ASSERT_TRUE(left.ok());
  for (const TreeEntry& entry : *left) EXPECT_NE(entry.path.rfind(".build-", 0), 0u) << entry.path;
}

TEST_F(SandboxE2eTest, RemoveTakesOneSandboxOutOfItsCache) {
  WriteSpec(cap_, kHelloSpec);
  Json entry = Json::parse(RunCapsule({"sandbox", "build", cap_, "--json"}).out);
  ASSERT_TRUE(entry.contains("digest"));
  std::string digest = entry["digest"];
  // A cache of its own, made of hard links to the shared one's files, to remove from.
  std::string cache = MakeTempDir("cache");
  ASSERT_EQ(Shell("cp -al " + SharedCache() + "/" + digest + " " + cache + "/"), 0);
  RunResult ls = RunCapsule({"sandbox", "ls", "--cache", cache});
  EXPECT_EQ(ls.out.rfind(digest.substr(0, 12) + "  debian:12", 0), 0u) << ls.out;
  EXPECT_EQ(RunCapsule({"sandbox", "rm", "0000000000", "--cache", cache}).exit_code, 1);
  RunResult rm = RunCapsule({"sandbox", "rm", digest.substr(0, 12), "--cache", cache, "--json"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_EQ(RunCapsule({"sandbox", "ls", "--cache", cache}).out, "");
  EXPECT_TRUE(PathExists(SharedCache() + "/" + digest + "/rootfs/usr/bin/hello"));
}

}  // namespace
}  // namespace capsule::testing
