// The command line for every day, end to end through the real binary: capsule help [COMMAND],
// -V, -j, completions generated from the command line's definition (every command, in bash,
// zsh and fish), - for standard input wherever a file is read (export | import, export |
// verify, pack | unpack), the one set of key options (--key FILE, --pubkey FILE|HEX, the old
// spellings still taken and hidden), and one message for a folder that is not a capsule,
// across every command that takes one, in lines of at most 160 characters without the
// parser's words.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <sstream>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;
using testing::RunResult;
using testing::Shell;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The commands a help text lists under "Subcommands:", as the parser knows them.
std::vector<std::string> CommandsListed(const std::string& help) {
  std::vector<std::string> out;
  std::istringstream lines(help);
  std::string line;
  bool in_list = false;
  while (std::getline(lines, line)) {
    if (line.rfind("Subcommands:", 0) == 0) {
      in_list = true;
      continue;
    }
    if (!in_list) continue;
    if (line.size() < 3 || line.rfind("  ", 0) != 0 || line[2] == ' ') {
      if (line.empty() || line[0] != ' ') in_list = false;
      continue;
    }
    out.push_back(line.substr(2, line.find(' ', 2) - 2));
  }
  return out;
}

// Every command path: "verify", "stream", "stream pack", ...
std::vector<std::string> EveryCommand() {
  std::vector<std::string> out;
  RunResult top = RunCapsule({"--help"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  for (const std::string& command : CommandsListed(top.out)) {
    out.push_back(command);
    RunResult group = RunCapsule({"help", command});
    for (const std::string& sub : CommandsListed(group.out)) out.push_back(command + " " + sub);
  }
  return out;
}

std::vector<std::string> Words(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> out;
  for (std::string word; in >> word;) out.push_back(word);
  return out;
}

class EverydayCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("everyday");
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    RunResult append = RunCapsule({"log", "append", cap_, "--type", "user_message", "--data", R"({"text":"hi"})"});
    ASSERT_EQ(append.exit_code, 0) << append.err;
  }
  void TearDown() override { (void)RemoveTree(root_); }
  std::string root_, cap_;
};

TEST_F(EverydayCliTest, HelpForEveryCommandAndTheVersion) {
  std::vector<std::string> commands = EveryCommand();
  ASSERT_GT(commands.size(), 30u) << "the listing was read";
  for (const std::string& command : commands) {
    std::vector<std::string> args = {"help"};
    for (const std::string& word : Words(command)) args.push_back(word);
    RunResult help = RunCapsule(args);
    EXPECT_EQ(help.exit_code, 0) << command << ": " << help.err;
    EXPECT_TRUE(Contains(help.out, "Usage:")) << command << ": " << help.out;
    EXPECT_TRUE(Contains(help.out, Words(command).back())) << command << ": " << help.out;
  }
  RunResult unknown = RunCapsule({"help", "verfy"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_TRUE(Contains(unknown.err, "'verfy' is not a command")) << unknown.err;
  for (const char* flag : {"-V", "--version"}) {
    RunResult version = RunCapsule({flag});
    EXPECT_EQ(version.exit_code, 0) << flag << version.err;
    EXPECT_EQ(version.out.rfind("capsule ", 0), 0u) << flag << ": " << version.out;
  }
}

TEST_F(EverydayCliTest, CompletionsListEveryCommandAndCompleteInBash) {
  std::vector<std::string> commands = EveryCommand();
  for (const char* shell : {"bash", "zsh", "fish"}) {
    RunResult script = RunCapsule({"completion", shell});
    ASSERT_EQ(script.exit_code, 0) << shell << script.err;
    for (const std::string& command : commands) {
      EXPECT_TRUE(Contains(script.out, Words(command).back())) << shell << " lacks " << command;
    }
    EXPECT_FALSE(Contains(script.out, "--seal-to")) << shell << ": old spellings stay hidden";
  }
  // The bash script completes for real: the commands after "capsule st", a group's commands,
  // a command's options.
  RunResult script = RunCapsule({"completion", "bash"});
  ASSERT_TRUE(WriteFileAtomic(root_ + "/capsule.bash", script.out).ok());
  auto complete = [&](const std::string& words) {
    std::string program = "source " + root_ + "/capsule.bash; COMP_WORDS=(" + words +
                          "); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _capsule; echo \"${COMPREPLY[*]}\"";
    return RunProgram("bash", {"-c", program});
  };
  RunResult top = complete("capsule st");
  EXPECT_EQ(top.out, "stream status\n") << top.err;
  RunResult group = complete("capsule stream un");
  EXPECT_EQ(group.out, "unpack\n") << group.err;
  RunResult options = complete("capsule -q verify " + cap_ + " --p");
  EXPECT_EQ(options.out, "--pubkey --progress\n") << options.err;
}

TEST_F(EverydayCliTest, DashReadsStandardInputWhereverAFileIsRead) {
  const std::string capsule = "./capsule";
  // export | import
  ASSERT_EQ(Shell(capsule + " export " + cap_ + " -o - | " + capsule + " import - " + root_ + "/imported"), 0);
  RunResult verified = RunCapsule({"verify", root_ + "/imported"});
  EXPECT_EQ(verified.exit_code, 0) << verified.out << verified.err;
  // export | verify -
  ASSERT_EQ(Shell(capsule + " export " + cap_ + " -o - | " + capsule + " verify - -j > " + root_ + "/verify.json"), 0);
  Result<std::string> report = ReadFile(root_ + "/verify.json");
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(Contains(*report, "\"ok\":true")) << *report;
  // A damaged tar on standard input is refused, named as standard input.
  RunResult damaged = RunCapsule({"verify", "-"}, "not a tar at all");
  EXPECT_EQ(damaged.exit_code, 1);
  EXPECT_TRUE(Contains(damaged.err, "standard input")) << damaged.err;
  EXPECT_FALSE(Contains(damaged.err + damaged.out, "capsule-stdin-")) << "no temporary file named: " << damaged.out;
  // stream pack | stream unpack -
  ASSERT_EQ(Shell(capsule + " stream pack " + cap_ + " --phase copy -o - | " + capsule + " stream unpack - " + root_ +
                  "/received"),
            0);
  RunResult log = RunCapsule({"log", root_ + "/received"});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  EXPECT_TRUE(Contains(log.out, "hi")) << log.out;
}

TEST_F(EverydayCliTest, OneSetOfKeyOptions) {
  RunResult keygen = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/sign.pem"});
  ASSERT_EQ(keygen.exit_code, 0) << keygen.err;
  const std::string hex = Words(keygen.out).at(0);
  ASSERT_TRUE(WriteFileAtomic(root_ + "/sign.pub", hex + "\n").ok());
  // export --key FILE; verify --pubkey HEX and --pubkey FILE.
  RunResult exported = RunCapsule({"export", cap_, "-o", root_ + "/signed.tar", "--key", root_ + "/sign.pem"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  for (const std::string& pubkey : {hex, root_ + "/sign.pub"}) {
    RunResult verified = RunCapsule({"verify", root_ + "/signed.tar", "--pubkey", pubkey});
    EXPECT_EQ(verified.exit_code, 0) << pubkey << ": " << verified.out << verified.err;
    EXPECT_TRUE(Contains(verified.out, "signature: good")) << verified.out;
  }
  // Another key's digits: refused.
  RunResult other = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/other.pem"});
  RunResult wrong = RunCapsule({"verify", root_ + "/signed.tar", "--pubkey", Words(other.out).at(0)});
  EXPECT_EQ(wrong.exit_code, 1) << wrong.out;
  // The old spelling still signs; --help shows only the new one.
  RunResult old = RunCapsule({"export", cap_, "-o", root_ + "/old.tar", "--sign", root_ + "/sign.pem"});
  EXPECT_EQ(old.exit_code, 0) << old.err;
  RunResult help = RunCapsule({"help", "export"});
  EXPECT_TRUE(Contains(help.out, "--key")) << help.out;
  EXPECT_FALSE(Contains(help.out, "--sign")) << help.out;
  // seal --pubkey HEX | open --key FILE; the old --to still seals.
  RunResult x = RunCapsule({"keygen", "--type", "x25519", "-o", root_ + "/seal.pem"});
  ASSERT_EQ(x.exit_code, 0) << x.err;
  const std::string xhex = Words(x.out).at(0);
  for (const char* flag : {"--pubkey", "--to"}) {
    ASSERT_EQ(Shell("echo secret words | ./capsule seal " + std::string(flag) + " " + xhex +
                    " | ./capsule open --key " + root_ + "/seal.pem > " + root_ + "/opened"),
              0)
        << flag;
    EXPECT_EQ(*ReadFile(root_ + "/opened"), "secret words\n") << flag;
  }
  // An option given twice is said in words, not in the parser's.
  RunResult twice = RunCapsule({"seal", "--pubkey", xhex, "--pubkey", xhex});
  EXPECT_EQ(twice.exit_code, 2);
  EXPECT_TRUE(Contains(twice.err, "--pubkey is given more than once")) << twice.err;
  EXPECT_FALSE(Contains(twice.err, "At Most")) << twice.err;
}

// Every command that takes a capsule, given a folder that is not one: the one message, naming
// the folder, and the one hint line saying what to do; exit 1; each line of at most 160
// characters. (The folder is under /tmp: a short path, as a user's would be.)
TEST_F(EverydayCliTest, OneNotACapsuleMessageAcrossEveryCommand) {
  char pattern[] = "/tmp/plain.XXXXXX";
  ASSERT_NE(::mkdtemp(pattern), nullptr);
  const std::string nc = pattern;
  ASSERT_TRUE(WriteFileAtomic(root_ + "/note.txt", "a note\n").ok());
  const std::string pem = root_ + "/none.pem";
  const std::vector<std::vector<std::string>> sweep = {
      {"verify", nc},
      {"export", nc, "-o", root_ + "/x.tar"},
      {"gc", nc},
      {"adopt", nc},
      {"stream", "pack", nc, "--phase", "copy", "-o", root_ + "/x.stream"},
      {"stream", "have", nc},
      {"log", nc},
      {"log", "append", nc, "--type", "user_message", "--data", "{}"},
      {"merge", nc, cap_},
      {"merge", cap_, nc},
      {"render", nc},
      {"sql", nc, "select 1"},
      {"reindex", nc},
      {"facts", nc, "user"},
      {"runs", nc},
      {"why", nc, "user", "language"},
      {"mcp", nc},
      {"status", nc},
      {"freeze", nc},
      {"thaw", nc},
      {"schedule", "status", nc},
      {"schedule", "pause", nc},
      {"threads", nc},
      {"narrow", nc, "main", "--tools", "read_file"},
      {"attach", nc, root_ + "/note.txt"},
      {"exec", nc, "true"},
      {"secret", "ls", nc},
      {"accept", nc},
      {"move", nc, "--to", "127.0.0.1:9", "--cert", pem, "--key", pem, "--ca", pem},
  };
  const std::string message = nc + ": not a capsule folder (no manifest.json)\n"
                                   "hint: name a capsule's folder or its mountpoint, or make one with capsule init\n";
  for (const std::vector<std::string>& args : sweep) {
    RunResult run = RunCapsule(args);
    std::string shown;
    for (const std::string& word : args) shown += word + " ";
    EXPECT_EQ(run.exit_code, 1) << shown << run.err;
    EXPECT_TRUE(Contains(run.err, message)) << shown << ": " << run.err;
    std::istringstream lines(run.err);
    int count = 0;
    for (std::string line; std::getline(lines, line); ++count) {
      EXPECT_LE(line.size(), 160u) << shown << ": " << line;
    }
    EXPECT_LE(count, 2) << shown << ": one line and at most a hint: " << run.err;
    EXPECT_FALSE(Contains(run.err, "At Most") || Contains(run.err, "not expected")) << shown << run.err;
  }
  // Under --json, the hint is a member of its own.
  RunResult json = RunCapsule({"verify", nc, "--json"});
  EXPECT_TRUE(Contains(json.out, "\"hint\":\"name a capsule's folder or its mountpoint")) << json.out;
  (void)RemoveTree(nc);
}

}  // namespace
}  // namespace capsule
