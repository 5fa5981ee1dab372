// No side effect when refused, and nothing written inside another capsule (man capsule.1,
// CONVENTIONS), through the real binary:
//
// - every command that takes a capsule folder, given a folder that is not one, is refused (exit
//   1, the folder named and why) and leaves every file, folder and mode as it was;
// - every command that writes a file or makes a folder, pointed inside another capsule's folder
//   or inside a capsulefs mount outside its files/, is refused naming that capsule, which is
//   left as it was and still verifies;
// - -o - is standard output (keygen's private key too, never onto a terminal); a cache or a
//   sidecar root is not made by a command that is refused or only lists.
//
// The commands are read from the program's own --help: a new command fails this test until it
// is classified below.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::RunCapsule;
using testing::RunResult;
using testing::Shell;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Names, types, sizes and modes of everything under `root`, one line each: what a refused
// command must leave exactly as it was.
std::string Snapshot(const std::string& root) {
  Result<std::vector<TreeEntry>> entries = ListTree(root);
  if (!entries.ok()) return "cannot list " + root + ": " + entries.status().message();
  std::ostringstream out;
  for (const TreeEntry& entry : *entries) {
    out << entry.path << " type " << static_cast<int>(entry.type) << " mode " << std::oct << entry.mode << std::dec;
    if (entry.type != TreeEntry::Type::kDirectory) out << " size " << entry.size;  // a folder's size is its file system's
    out << "\n";
  }
  return out.str();
}

// The names of the commands a --help lists under "Subcommands:".
std::vector<std::string> SubcommandsOf(const std::vector<std::string>& command) {
  std::vector<std::string> args = command;
  args.push_back("--help");
  RunResult help = RunCapsule(args);
  EXPECT_EQ(help.exit_code, 0) << help.err;
  std::vector<std::string> names;
  std::istringstream lines(help.out);
  bool listing = false;
  for (std::string line; std::getline(lines, line);) {
    if (line == "Subcommands:" || line == "SUBCOMMANDS:") {
      listing = true;
    } else if (listing && line.rfind("  ", 0) == 0 && line.size() > 2 && line[2] != ' ') {
      names.push_back(line.substr(2, line.find(' ', 2) - 2));
    } else if (listing && line.empty()) {
      listing = false;
    }
  }
  return names;
}

// Every command of the program, "stream pack" style, groups ("stream") included.
std::set<std::string> AllCommands(const std::vector<std::string>& prefix = {}) {
  std::set<std::string> all;
  for (const std::string& name : SubcommandsOf(prefix)) {
    std::vector<std::string> path = prefix;
    path.push_back(name);
    std::string full;
    for (const std::string& word : path) full += (full.empty() ? "" : " ") + word;
    all.insert(full);
    for (const std::string& sub : AllCommands(path)) all.insert(sub);
  }
  return all;
}

// How each command is swept. {PLAIN} is a folder that is not a capsule (a file and a folder in
// it); {CAP} a capsule and {IN} a path inside it (or inside a mount of it); {SRC} another
// capsule; {TAR}, {STREAM} an export and a stream of {SRC}; {FILE} a text file; {KEY} an X25519
// private key; {ROOT} the test's folder.
struct Entry {
  std::vector<std::string> on_plain;       // given {PLAIN} where a capsule folder is expected
  std::string why;                         // words its refusal must hold besides {PLAIN}
  std::vector<std::string> writes_inside;  // its output pointed at {IN}
  std::string neither;                     // why it is in neither sweep
};

const std::string kNotACapsule = "not a capsule folder (no manifest.json)";

const std::map<std::string, Entry>& Commands() {
  static const auto* commands = new std::map<std::string, Entry>{
      {"init", {{}, "", {"init", "{IN}", "--id", "a2", "--name", "N"}, ""}},
      {"verify", {{"verify", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"accept", {{"accept", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"export", {{"export", "{PLAIN}", "-o", "{ROOT}/out.tar"}, kNotACapsule, {"export", "{SRC}", "-o", "{IN}"}, ""}},
      {"gc", {{"gc", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"adopt", {{"adopt", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"import", {{}, "", {"import", "{TAR}", "{IN}"}, ""}},
      {"keygen", {{}, "", {"keygen", "--type", "x25519", "-o", "{IN}"}, ""}},
      {"seal", {{}, "", {}, "standard input to standard output"}},
      {"open", {{}, "", {}, "standard input to standard output"}},
      {"stream", {{}, "", {}, "a group"}},
      {"stream pack",
       {{"stream", "pack", "{PLAIN}", "--phase", "copy", "-o", "{ROOT}/s.out"},
        kNotACapsule,
        {"stream", "pack", "{SRC}", "--phase", "copy", "-o", "{IN}"},
        ""}},
      {"stream unpack", {{"stream", "unpack", "{STREAM}", "{PLAIN}"}, kNotACapsule, {"stream", "unpack", "{STREAM}", "{IN}"}, ""}},
      {"stream have", {{"stream", "have", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"log", {{"log", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"log append",
       {{"log", "append", "{PLAIN}", "--type", "user_message", "--data", R"({"text":"hi"})"}, kNotACapsule, {}, ""}},
      {"merge", {{"merge", "{PLAIN}", "{SRC}"}, kNotACapsule, {}, ""}},
      {"render", {{"render", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"sql", {{"sql", "{PLAIN}", "SELECT 1"}, kNotACapsule, {}, ""}},
      {"reindex", {{"reindex", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"facts", {{"facts", "{PLAIN}", "user"}, kNotACapsule, {}, ""}},
      {"runs", {{"runs", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"why", {{"why", "{PLAIN}", "user", "language"}, kNotACapsule, {}, ""}},
      {"search", {{"search", "{PLAIN}", "words"}, kNotACapsule, {}, ""}},
      {"mcp", {{"mcp", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"status", {{"status", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"freeze", {{"freeze", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"thaw", {{"thaw", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"schedule", {{}, "", {}, "a group"}},
      {"schedule pause", {{"schedule", "pause", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"schedule resume", {{"schedule", "resume", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"schedule status", {{"schedule", "status", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"threads", {{"threads", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"narrow", {{"narrow", "{PLAIN}", "main", "--none"}, kNotACapsule, {}, ""}},
      {"attach", {{"attach", "{PLAIN}", "{FILE}"}, kNotACapsule, {}, ""}},
      {"serve",
       {{},
        "",
        {"serve", "--root", "{IN}", "--listen", "127.0.0.1:0", "--cert", "{FILE}", "--key", "{FILE}", "--ca", "{FILE}",
         "--seal-key", "{KEY}"},
        ""}},
      {"sidecar", {{}, "", {}, "a group"}},
      {"fleet", {{}, "", {}, "a group"}},
      {"fleet ls", {{}, "", {}, "reads the fleet's registry on etcd, no capsule (fleet_move_test)"}},
      {"fleet where", {{}, "", {}, "reads the fleet's registry on etcd, no capsule (fleet_move_test)"}},
      {"fleet sidecars", {{}, "", {}, "reads the fleet's registry on etcd, no capsule (fleet_move_test)"}},
      {"fleet retire", {{}, "", {}, "writes the fleet's registry on etcd, no capsule (fleet_move_test)"}},
      {"fleet drain", {{}, "", {}, "moves the agents the fleet's registry names, from --from (fleet_move_test)"}},
      {"sidecar status", {{}, "", {}, "reads a sidecar's root, no capsule (ServeAndSandboxMakeNoFolderWhenRefused)"}},
      {"move", {{"move", "{PLAIN}", "--to", "127.0.0.1:1", "--cert", "{FILE}", "--key", "{FILE}", "--ca", "{FILE}"},
                kNotACapsule,
                {},
                ""}},
      {"exec", {{"exec", "{PLAIN}", "--", "true"}, kNotACapsule, {"exec", "--sandbox-cache", "{IN}", "{SRC}", "--", "true"}, ""}},
      {"sandbox", {{}, "", {}, "a group"}},
      {"sandbox build",
       {{"sandbox", "build", "{PLAIN}", "--cache", "{ROOT}/sandboxes"}, kNotACapsule, {"sandbox", "build", "{SRC}", "--cache", "{IN}"}, ""}},
      {"sandbox ls", {{}, "", {}, "lists a cache, makes none (ServeAndSandboxMakeNoFolderWhenRefused)"}},
      {"sandbox rm", {{}, "", {}, "removes from a cache, makes none (ServeAndSandboxMakeNoFolderWhenRefused)"}},
      {"secret", {{}, "", {}, "a group"}},
      {"secret set", {{"secret", "set", "{PLAIN}", "TOKEN"}, kNotACapsule, {}, ""}},
      {"secret rm", {{"secret", "rm", "{PLAIN}", "TOKEN"}, kNotACapsule, {}, ""}},
      {"secret ls", {{"secret", "ls", "{PLAIN}"}, kNotACapsule, {}, ""}},
      {"help", {{}, "", {}, "prints a command's help, reads no capsule"}},
      {"completion", {{}, "", {}, "prints a completion script, reads no capsule"}},
  };
  return *commands;
}

class RefusalSweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("refusals");
    vars_["{ROOT}"] = root_;
    vars_["{SRC}"] = root_ + "/src";
    vars_["{CAP}"] = root_ + "/cap";
    vars_["{PLAIN}"] = root_ + "/plain";
    vars_["{TAR}"] = root_ + "/src.tar";
    vars_["{STREAM}"] = root_ + "/src.stream";
    vars_["{FILE}"] = root_ + "/notes.txt";
    vars_["{KEY}"] = root_ + "/seal.key";
    for (const char* dir : {"{SRC}", "{CAP}"}) {
      RunResult init = RunCapsule({"init", vars_[dir], "--id", "agent-1", "--name", "Agent"});
      ASSERT_EQ(init.exit_code, 0) << init.err;
    }
    RunResult said = RunCapsule({"log", "append", vars_["{SRC}"], "--type", "user_message", "--data", R"({"text":"hi"})"});
    ASSERT_EQ(said.exit_code, 0) << said.err;
    ASSERT_EQ(RunCapsule({"export", vars_["{SRC}"], "-o", vars_["{TAR}"]}).exit_code, 0);
    ASSERT_EQ(RunCapsule({"stream", "pack", vars_["{SRC}"], "--phase", "copy", "-o", vars_["{STREAM}"]}).exit_code, 0);
    ASSERT_EQ(RunCapsule({"keygen", "--type", "x25519", "-o", vars_["{KEY}"]}).exit_code, 0);
    ASSERT_TRUE(WriteFileAtomic(vars_["{FILE}"], "plain text\n").ok());
    // A project folder that is not a capsule, with a file and a folder of its own.
    ASSERT_TRUE(MakeDirectories(vars_["{PLAIN}"] + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(vars_["{PLAIN}"] + "/README", "not a capsule\n").ok());
    ASSERT_TRUE(WriteFileAtomic(vars_["{PLAIN}"] + "/src/main.c", "int main() {}\n", 0600).ok());
  }

  std::vector<std::string> Expand(std::vector<std::string> args) const {
    for (std::string& arg : args) {
      for (const auto& [key, value] : vars_) {
        for (size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
      }
    }
    return args;
  }

  // Every output of the sweep pointed at `inside`, refused with `words`, leaving `capsule` as
  // it was.
  void RefuseEveryOutputAt(const std::string& inside, const std::string& words, const std::string& capsule) {
    vars_["{IN}"] = inside;
    int swept = 0;
    for (const auto& [name, entry] : Commands()) {
      if (entry.writes_inside.empty()) continue;
      ++swept;
      const std::string before = Snapshot(capsule);
      RunResult run = RunCapsule(Expand(entry.writes_inside));
      EXPECT_EQ(run.exit_code, 1) << name << ": " << run.out << run.err;
      EXPECT_TRUE(Contains(run.err, words)) << name << " does not name the capsule (" << words << "): " << run.err;
      EXPECT_TRUE(Contains(run.err, "nothing written") || Contains(run.err, "never goes into a capsule"))
          << name << ": " << run.err;
      EXPECT_EQ(Snapshot(capsule), before) << name << " changed " << capsule;
    }
    EXPECT_GE(swept, 9);
  }

  std::string root_;
  std::map<std::string, std::string> vars_;
};

TEST_F(RefusalSweepTest, EveryCommandIsClassified) {
  std::set<std::string> found = AllCommands();
  ASSERT_GT(found.size(), 30u) << "the --help listing was not read";
  for (const std::string& name : found) {
    auto it = Commands().find(name);
    ASSERT_NE(it, Commands().end()) << "capsule " << name
                                    << " is not classified by tests/refusal_sweep_test.cc: say whether it takes a "
                                       "capsule folder, writes an output, or neither";
    const Entry& entry = it->second;
    EXPECT_TRUE(!entry.on_plain.empty() || !entry.writes_inside.empty() || !entry.neither.empty()) << name;
  }
  for (const auto& [name, entry] : Commands()) EXPECT_TRUE(found.count(name)) << name << " is no command any more";
}

TEST_F(RefusalSweepTest, ACommandGivenAFolderThatIsNoCapsuleLeavesEverythingAsItWas) {
  const std::string plain = vars_["{PLAIN}"];
  for (const auto& [name, entry] : Commands()) {
    if (entry.on_plain.empty()) continue;
    const std::string before = Snapshot(root_);
    RunResult run = RunCapsule(Expand(entry.on_plain), name == "secret set" ? "value\n" : "");
    EXPECT_EQ(run.exit_code, 1) << name << ": " << run.out << run.err;
    EXPECT_EQ(run.err.rfind("capsule: ", 0), 0u) << name << ": " << run.err;
    EXPECT_TRUE(Contains(run.err, plain + ": " + entry.why)) << name << ": " << run.err;
    EXPECT_EQ(Snapshot(root_), before) << name << " left something behind";
  }
  // What a later init --workspace would have carried into the agent's files/.
  EXPECT_FALSE(PathExists(plain + "/.capsule"));
}

TEST_F(RefusalSweepTest, NothingIsWrittenInsideAnotherCapsuleFolder) {
  const std::string cap = vars_["{CAP}"];
  RefuseEveryOutputAt(cap + "/memory/made-here", "is inside the capsule folder " + RealPath(cap), cap);
  // Deeper, through a link to the folder, and into its local folder: the same capsule.
  ASSERT_EQ(::symlink((cap + "/memory").c_str(), (root_ + "/link").c_str()), 0);
  for (const std::string& inside : {cap + "/.capsule/work/deep/er", root_ + "/link/made-here", cap + "/x/../y"}) {
    RunResult run = RunCapsule({"keygen", "--type", "ed25519", "-o", inside});
    EXPECT_EQ(run.exit_code, 1) << inside;
    EXPECT_TRUE(Contains(run.err, "is inside the capsule folder " + RealPath(cap))) << inside << ": " << run.err;
  }
  RunResult verify = RunCapsule({"verify", cap});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  // Beside a capsule is outside it.
  EXPECT_EQ(RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/beside.key"}).exit_code, 0);
  EXPECT_EQ(RunCapsule({"init", root_ + "/beside", "--id", "b", "--name", "B"}).exit_code, 0);
}

TEST_F(RefusalSweepTest, AMountedCapsuleTakesFilesOnlyInItsWorkspace) {
  const std::string cap = vars_["{CAP}"], mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  {
    Mount mount(cap, mnt);
    ASSERT_TRUE(mount.up());
    RefuseEveryOutputAt(mnt + "/made-here", "is inside the capsulefs mount " + RealPath(mnt), cap);
    // Behind the mount, its folder is refused the same.
    RunResult behind = RunCapsule({"stream", "pack", vars_["{SRC}"], "--phase", "copy", "-o", cap + "/s.stream"});
    EXPECT_EQ(behind.exit_code, 1);
    EXPECT_TRUE(Contains(behind.err, "is inside the capsule folder " + RealPath(cap))) << behind.err;
    // files/ is the agent's workspace: a user's stream goes there like any file; a private
    // key never does.
    RunResult stream = RunCapsule({"stream", "pack", vars_["{SRC}"], "--phase", "copy", "-o", mnt + "/files/s.stream"});
    EXPECT_EQ(stream.exit_code, 0) << stream.err;
    EXPECT_TRUE(PathExists(mnt + "/files/s.stream"));
    RunResult key = RunCapsule({"keygen", "--type", "x25519", "-o", mnt + "/files/k.key"});
    EXPECT_EQ(key.exit_code, 1);
    EXPECT_TRUE(Contains(key.err, "is inside the workspace of the capsulefs mount " + RealPath(mnt))) << key.err;
    EXPECT_TRUE(Contains(key.err, "a private key never goes into a capsule")) << key.err;
    EXPECT_FALSE(PathExists(mnt + "/files/k.key"));
    ASSERT_EQ(mount.Unmount(), 0);
  }
  RunResult verify = RunCapsule({"verify", cap});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// Runs the program with its standard output on a new terminal; what it wrote there.
RunResult RunOnTerminal(const std::vector<std::string>& args) {
  RunResult result;
  int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || ::grantpt(master) != 0 || ::unlockpt(master) != 0) return result;
  std::string slave = ::ptsname(master);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::setsid();
    int fd = ::open(slave.c_str(), O_RDWR);
    ::dup2(fd, STDOUT_FILENO);
    ::dup2(fd, STDERR_FILENO);
    std::vector<char*> argv = {const_cast<char*>("./capsule")};
    for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    ::execv("./capsule", argv.data());
    ::_exit(127);
  }
  char buffer[4096];
  for (ssize_t n; (n = ::read(master, buffer, sizeof buffer)) > 0;) result.out.append(buffer, static_cast<size_t>(n));
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(master);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return result;
}

TEST_F(RefusalSweepTest, DashIsStandardOutputForKeygen) {
  const std::string here = root_ + "/here";
  ASSERT_TRUE(MakeDirectories(here).ok());
  const std::string capsule = RealPath("./capsule");
  ASSERT_EQ(Shell("cd '" + here + "' && '" + capsule + "' keygen --type x25519 -o - > '" + root_ + "/key.pem' 2> '" +
                  root_ + "/public.hex'"),
            0);
  EXPECT_FALSE(PathExists(here + "/-"));
  Result<std::string> pem = ReadFile(root_ + "/key.pem");
  ASSERT_TRUE(pem.ok());
  EXPECT_EQ(pem->rfind("-----BEGIN PRIVATE KEY-----\n", 0), 0u) << *pem;
  Result<std::string> hex = ReadFile(root_ + "/public.hex");
  ASSERT_TRUE(hex.ok());
  ASSERT_EQ(hex->size(), 65u) << *hex;
  // The key on standard output is the one whose public half went to standard error.
  RunResult sealed = RunCapsule({"seal", "--to", hex->substr(0, 64)}, "for the key on stdout");
  ASSERT_EQ(sealed.exit_code, 0) << sealed.err;
  RunResult opened = RunCapsule({"open", "--key", root_ + "/key.pem"}, sealed.out);
  EXPECT_EQ(opened.exit_code, 0) << opened.err;
  EXPECT_EQ(opened.out, "for the key on stdout");

  // Never onto a terminal.
  RunResult terminal = RunOnTerminal({"keygen", "--type", "ed25519", "-o", "-"});
  EXPECT_EQ(terminal.exit_code, 1) << terminal.out;
  EXPECT_TRUE(Contains(terminal.out, "capsule: keygen -o -: standard output is a terminal")) << terminal.out;
  EXPECT_FALSE(Contains(terminal.out, "PRIVATE KEY")) << terminal.out;
}

// init and import make the parents of their folder; refused after that (a workspace that is
// no folder, a tar that is no export), they take them away again.
TEST_F(RefusalSweepTest, InitAndImportRefusedLateLeaveNoFolder) {
  const std::string before = Snapshot(root_);
  RunResult init = RunCapsule({"init", root_ + "/made/by/init/cap", "--id", "a3", "--name", "N", "--workspace",
                               vars_["{FILE}"]});
  EXPECT_EQ(init.exit_code, 1) << init.out;
  EXPECT_TRUE(Contains(init.err, vars_["{FILE}"] + ": workspace source is not a folder")) << init.err;
  EXPECT_FALSE(PathExists(root_ + "/made")) << Snapshot(root_);

  RunResult import = RunCapsule({"import", vars_["{FILE}"], root_ + "/made/by/import/cap"});
  EXPECT_EQ(import.exit_code, 1) << import.out;
  EXPECT_TRUE(Contains(import.err, vars_["{FILE}"] + ": tar: ")) << import.err;
  EXPECT_FALSE(PathExists(root_ + "/made")) << Snapshot(root_);

  // An export that does not verify (its journal edited behind its manifest) is refused once
  // it is unpacked: nothing of it, nor the folders made for it, stays.
  const std::string tampered = root_ + "/tampered.tar";
  std::string tar = *ReadFile(vars_["{TAR}"]);
  const size_t hi = tar.find(R"("text":"hi")");
  ASSERT_NE(hi, std::string::npos);
  tar.replace(hi, 11, R"("text":"ho")");
  ASSERT_TRUE(WriteFileAtomic(tampered, tar).ok());
  RunResult unverified = RunCapsule({"import", tampered, root_ + "/made/by/import/cap"});
  EXPECT_EQ(unverified.exit_code, 1) << unverified.out;
  EXPECT_TRUE(Contains(unverified.err, "does not verify")) << unverified.err;
  EXPECT_FALSE(PathExists(root_ + "/made")) << Snapshot(root_);
  ASSERT_EQ(::unlink(tampered.c_str()), 0);
  EXPECT_EQ(Snapshot(root_), before);

  // Where the parents were there already, they stay.
  ASSERT_TRUE(MakeDirectories(root_ + "/kept").ok());
  EXPECT_EQ(RunCapsule({"import", vars_["{FILE}"], root_ + "/kept/cap"}).exit_code, 1);
  EXPECT_TRUE(PathExists(root_ + "/kept"));
  EXPECT_FALSE(PathExists(root_ + "/kept/cap"));
}

TEST_F(RefusalSweepTest, ServeAndSandboxMakeNoFolderWhenRefused) {
  const std::string cache = root_ + "/no-cache";
  RunResult ls = RunCapsule({"sandbox", "ls", "--cache", cache, "--json"});
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_TRUE(Contains(ls.out, R"("sandboxes":[])")) << ls.out;
  EXPECT_FALSE(PathExists(cache));
  RunResult rm = RunCapsule({"sandbox", "rm", "0123456789abcdef", "--cache", cache});
  EXPECT_EQ(rm.exit_code, 1);
  EXPECT_TRUE(Contains(rm.err, "sandbox 0123456789abcdef: not in the cache " + cache)) << rm.err;
  EXPECT_FALSE(PathExists(cache));
  RunResult build = RunCapsule({"sandbox", "build", vars_["{PLAIN}"], "--cache", cache});
  EXPECT_EQ(build.exit_code, 1);
  EXPECT_FALSE(PathExists(cache));

  // A sidecar whose TLS identity is no certificate makes no root.
  const std::string sidecar_root = root_ + "/sidecar";
  RunResult serve = RunCapsule({"serve", "--root", sidecar_root, "--listen", "127.0.0.1:0", "--cert", vars_["{FILE}"],
                                "--key", vars_["{FILE}"], "--ca", vars_["{FILE}"], "--seal-key", vars_["{KEY}"]});
  EXPECT_EQ(serve.exit_code, 1) << serve.out;
  EXPECT_TRUE(Contains(serve.err, vars_["{FILE}"])) << serve.err;
  EXPECT_FALSE(PathExists(sidecar_root));
  RunResult status = RunCapsule({"sidecar", "status", "--root", sidecar_root});
  EXPECT_FALSE(PathExists(sidecar_root)) << status.out << status.err;
}

}  // namespace
}  // namespace capsule
