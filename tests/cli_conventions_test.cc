// The conventions every command keeps (man capsule.1, CONVENTIONS), end to end through the
// real binary: --json on success and failure alike, a capsule named by its mountpoint, the
// messages in words, and the exit statuses (0 done, 1 not so, 2 usage).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "capsule/base/canonical_json.h"
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

// Every line of standard output is one JSON value (log --json prints one event a line).
std::vector<Json> JsonLines(const RunResult& run, const std::string& name) {
  std::vector<Json> out;
  size_t start = 0;
  while (start < run.out.size()) {
    size_t end = run.out.find('\n', start);
    if (end == std::string::npos) end = run.out.size();
    std::string line = run.out.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    Result<Json> json = ParseJson(line, name);
    EXPECT_TRUE(json.ok()) << name << ": not JSON: " << line;
    if (json.ok()) out.push_back(*json);
  }
  return out;
}

class CliConventionsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("conventions");
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    said_ = Append(cap_, "user_message", R"({"text":"je parle français"})");
    Append(cap_, "fact_remembered",
           R"({"subject":"user","key":"language","value":"fr","confidence":0.9,"source":")" + said_ + R"("})");
    Append(cap_, "model_switch", R"({"provider":"openai","model":"gpt-4o"})");
  }

  std::string Append(const std::string& dir, const std::string& type, const std::string& data) {
    RunResult run = RunCapsule({"log", "append", dir, "--type", type, "--data", data});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    std::string id = run.out;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    return id;
  }

  std::vector<std::string> Expand(std::vector<std::string> args, const std::string& dir) const {
    for (std::string& arg : args) {
      for (const auto& [key, value] : {std::pair<std::string, std::string>{"{CAP}", dir}, {"{ROOT}", root_}}) {
        for (size_t at; (at = arg.find(key)) != std::string::npos;) arg.replace(at, key.size(), value);
      }
    }
    return args;
  }

  std::string root_, cap_, said_;
};

struct Case {
  const char* name;
  std::vector<std::string> args;  // {CAP} and {ROOT} stand for the capsule and the test's folder
};

TEST_F(CliConventionsTest, EveryReportingCommandSpeaksJsonOnSuccessAndFailure) {
  ASSERT_EQ(Shell("cp -a '" + cap_ + "' '" + root_ + "/copy'"), 0);
  ASSERT_EQ(RunCapsule({"export", cap_, "-o", root_ + "/cap.tar"}).exit_code, 0);
  ASSERT_EQ(RunCapsule({"stream", "pack", cap_, "--phase", "copy", "-o", root_ + "/copy.stream"}).exit_code, 0);
  const std::vector<Case> successes = {
      {"init", {"init", "{ROOT}/new", "--id", "agent-2", "--name", "New"}},
      {"verify", {"verify", "{CAP}"}},
      {"export", {"export", "{CAP}", "-o", "{ROOT}/out.tar"}},
      {"gc", {"gc", "{CAP}"}},
      {"adopt", {"adopt", "{ROOT}/copy"}},
      {"import", {"import", "{ROOT}/cap.tar", "{ROOT}/imported"}},
      {"keygen", {"keygen", "--type", "x25519", "-o", "{ROOT}/x.key"}},
      {"log", {"log", "{CAP}"}},
      {"log append", {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"hi"})"}},
      {"merge", {"merge", "{CAP}", "{ROOT}/copy"}},
      {"render", {"render", "{CAP}"}},
      {"sql", {"sql", "{CAP}", "SELECT count(*) AS n FROM messages"}},
      {"reindex", {"reindex", "{CAP}"}},
      {"facts", {"facts", "{CAP}", "user"}},
      {"runs", {"runs", "{CAP}"}},
      {"why", {"why", "{CAP}", "user", "language"}},
      {"stream pack", {"stream", "pack", "{CAP}", "--phase", "copy", "-o", "{ROOT}/s"}},
      {"stream unpack", {"stream", "unpack", "{ROOT}/copy.stream", "{ROOT}/unpacked"}},
      {"stream have", {"stream", "have", "{CAP}"}},
      {"status", {"status", "{CAP}"}},
      {"secret ls", {"secret", "ls", "{CAP}"}},
      {"sandbox ls", {"sandbox", "ls", "--cache", "{ROOT}/sandboxes"}},
  };
  for (const Case& c : successes) {
    std::vector<std::string> args = Expand(c.args, cap_);
    args.push_back("--json");
    RunResult run = RunCapsule(args);
    EXPECT_EQ(run.exit_code, 0) << c.name << ": " << run.err;
    std::vector<Json> values = JsonLines(run, c.name);
    EXPECT_FALSE(values.empty()) << c.name << " printed no JSON";
    for (const Json& value : values) EXPECT_FALSE(value.contains("error")) << c.name << ": " << value.dump();
  }

  const std::vector<Case> failures = {
      {"init", {"init", "{CAP}", "--id", "x", "--name", "y"}},
      {"verify", {"verify", "{ROOT}/nothing"}},
      {"export", {"export", "{ROOT}/nothing", "-o", "{ROOT}/out2.tar"}},
      {"gc", {"gc", "{ROOT}/nothing"}},
      {"adopt", {"adopt", "{ROOT}/nothing"}},
      {"import", {"import", "{ROOT}/nothing.tar", "{ROOT}/imported2"}},
      {"keygen", {"keygen", "--type", "x25519", "-o", "{ROOT}/x.key"}},
      {"log", {"log", "{ROOT}/nothing"}},
      {"log append", {"log", "append", "{CAP}", "--type", "chat", "--data", "{}"}},
      {"merge", {"merge", "{CAP}", "{ROOT}/nothing"}},
      {"render", {"render", "{ROOT}/nothing"}},
      {"sql", {"sql", "{CAP}", "SELEKT"}},
      {"reindex", {"reindex", "{ROOT}/nothing"}},
      {"facts", {"facts", "{CAP}", "nobody"}},
      {"runs", {"runs", "{ROOT}/nothing"}},
      {"why", {"why", "{CAP}", "nobody", "name"}},
      {"stream pack", {"stream", "pack", "{ROOT}/nothing", "--phase", "copy", "-o", "{ROOT}/s2"}},
      {"stream unpack", {"stream", "unpack", "{ROOT}/nothing", "{ROOT}/unpacked2"}},
      {"stream have", {"stream", "have", "{ROOT}/nothing"}},
      {"status", {"status", "{ROOT}/nothing"}},
      {"freeze", {"freeze", "{CAP}"}},  // no mount serves it
      {"thaw", {"thaw", "{CAP}"}},
      {"move", {"move", "{ROOT}/nothing", "--to", "127.0.0.1:1", "--cert", "c", "--key", "k", "--ca", "a"}},
      {"sidecar status", {"sidecar", "status", "--root", "{ROOT}/nothing"}},
      {"secret rm", {"secret", "rm", "conventions-agent", "NO_SUCH_SECRET"}},
      {"secret ls", {"secret", "ls", "{ROOT}/nothing"}},
      {"sandbox build", {"sandbox", "build", "{ROOT}/nothing", "--cache", "{ROOT}/sandboxes"}},
      {"sandbox rm", {"sandbox", "rm", "00000000", "--cache", "{ROOT}/sandboxes"}},
  };
  for (const Case& c : failures) {
    std::vector<std::string> args = Expand(c.args, cap_);
    args.push_back("--json");
    RunResult run = RunCapsule(args);
    EXPECT_EQ(run.exit_code, 1) << c.name << ": " << run.err;
    std::vector<Json> values = JsonLines(run, c.name);
    ASSERT_EQ(values.size(), 1u) << c.name << ": " << run.out;
    const Json& error = values[0]["error"];
    ASSERT_TRUE(error.is_object()) << c.name << ": " << run.out;
    EXPECT_TRUE(error["code"].is_string() && !error["code"].get<std::string>().empty()) << c.name;
    ASSERT_TRUE(error["message"].is_string()) << c.name;
    // The same words on standard error, in the form the command line promises.
    EXPECT_TRUE(Contains(run.err, "capsule: " + error["message"].get<std::string>())) << c.name << ": " << run.err;
  }

  // A usage error under --json: code "usage", exit 2.
  RunResult usage = RunCapsule({"render", cap_, "--context-tokens", "0", "--json"});
  EXPECT_EQ(usage.exit_code, 2);
  std::vector<Json> values = JsonLines(usage, "usage");
  ASSERT_EQ(values.size(), 1u) << usage.out;
  EXPECT_EQ(values[0]["error"]["code"], "usage");

  // With -o - standard output is the data: an error goes to standard error only.
  RunResult to_stdout = RunCapsule({"export", root_ + "/nothing", "-o", "-", "--json"});
  EXPECT_EQ(to_stdout.exit_code, 1);
  EXPECT_EQ(to_stdout.out, "");
  EXPECT_TRUE(Contains(to_stdout.err, "no such file or folder")) << to_stdout.err;

  // A capsule that does not verify: the report and the error in one object, exit 1.
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/memory/working_memory.md", "changed behind its back\n").ok());
  RunResult bad = RunCapsule({"verify", cap_, "--json"});
  EXPECT_EQ(bad.exit_code, 1);
  values = JsonLines(bad, "verify");
  ASSERT_EQ(values.size(), 1u) << bad.out;
  EXPECT_EQ(values[0]["ok"], false);
  EXPECT_FALSE(values[0]["problems"].empty());
  EXPECT_EQ(values[0]["error"]["code"], "corruption");
}

TEST_F(CliConventionsTest, AMountpointNamesItsCapsuleForEveryCommand) {
  ASSERT_EQ(Shell("cp -a '" + cap_ + "' '" + root_ + "/copy'"), 0);
  const std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Mount mount(cap_, mnt);
  ASSERT_TRUE(mount.up());
  const std::vector<Case> commands = {
      {"verify", {"verify", "{CAP}"}},
      {"export", {"export", "{CAP}", "-o", "{ROOT}/out.tar"}},
      {"log", {"log", "{CAP}"}},
      {"log append", {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"through the mount"})"}},
      {"merge", {"merge", "{CAP}", "{ROOT}/copy"}},
      {"render", {"render", "{CAP}"}},
      {"sql", {"sql", "{CAP}", "SELECT count(*) FROM messages"}},
      {"reindex", {"reindex", "{CAP}"}},
      {"facts", {"facts", "{CAP}", "user"}},
      {"runs", {"runs", "{CAP}"}},
      {"why", {"why", "{CAP}", "user", "language"}},
      {"stream pack", {"stream", "pack", "{CAP}", "--phase", "copy", "-o", "{ROOT}/s"}},
      {"stream have", {"stream", "have", "{CAP}"}},
      {"status", {"status", "{CAP}"}},
      {"freeze", {"freeze", "{CAP}"}},
      {"thaw", {"thaw", "{CAP}"}},
  };
  for (const Case& c : commands) {
    RunResult run = RunCapsule(Expand(c.args, mnt));
    EXPECT_EQ(run.exit_code, 0) << c.name << ": " << run.err;
    EXPECT_FALSE(Contains(run.out + run.err, "not in manifest")) << c.name << ": " << run.out << run.err;
  }
  EXPECT_TRUE(Contains(RunCapsule({"log", mnt}).out, "through the mount"));
  EXPECT_TRUE(Contains(RunCapsule({"verify", mnt}).out, "ok: "));
  // gc and adopt name the mount's folder too, and refuse it because it is mounted.
  RunResult gc = RunCapsule({"gc", mnt});
  EXPECT_EQ(gc.exit_code, 1);
  EXPECT_TRUE(Contains(gc.err, "is mounted")) << gc.err;
  ASSERT_EQ(mount.Unmount(), 0);
  RunResult verify = RunCapsule({"verify", cap_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

TEST_F(CliConventionsTest, FreezeAndThawSucceedWhenAlreadyDone) {
  const std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Mount mount(cap_, mnt);
  ASSERT_TRUE(mount.up());
  for (const char* verb : {"freeze", "freeze", "thaw", "thaw"}) {
    RunResult run = RunCapsule({verb, mnt, "--json"});
    EXPECT_EQ(run.exit_code, 0) << verb << ": " << run.err;
    std::vector<Json> values = JsonLines(run, verb);
    ASSERT_EQ(values.size(), 1u) << verb;
    EXPECT_EQ(values[0]["state"], std::string(verb) == "freeze" ? "frozen" : "active") << verb;
  }
}

TEST_F(CliConventionsTest, MessagesAreWords) {
  RunResult mistyped = RunCapsule({"verfy", cap_});
  EXPECT_EQ(mistyped.exit_code, 2);
  EXPECT_TRUE(Contains(mistyped.err, "capsule: 'verfy' is not a command; did you mean 'verify'?")) << mistyped.err;
  RunResult nested = RunCapsule({"stream", "pakc", cap_});
  EXPECT_EQ(nested.exit_code, 2);
  EXPECT_TRUE(Contains(nested.err, "did you mean 'pack'?")) << nested.err;
  RunResult far = RunCapsule({"frobnicate"});
  EXPECT_EQ(far.exit_code, 2);
  EXPECT_TRUE(Contains(far.err, "'frobnicate' is not a command")) << far.err;
  // A group without its command names its commands instead of CLI11's "A subcommand is
  // required".
  RunResult bare = RunCapsule({"stream"});
  EXPECT_EQ(bare.exit_code, 2);
  EXPECT_TRUE(Contains(bare.err, "capsule: stream: which command? one of pack, unpack, have")) << bare.err;
  EXPECT_FALSE(Contains(bare.err, "A subcommand is required")) << bare.err;
  RunResult bare_json = RunCapsule({"sidecar", "--json"});
  EXPECT_EQ(bare_json.exit_code, 2);
  EXPECT_TRUE(Contains(bare_json.out, "which command? one of status")) << bare_json.out;
  EXPECT_EQ(RunCapsule({"stream", "--help"}).exit_code, 0);
  RunResult nothing = RunCapsule({});
  EXPECT_EQ(nothing.exit_code, 2);
  EXPECT_TRUE(Contains(nothing.err, "capsule: which command? one of ")) << nothing.err;
  EXPECT_FALSE(Contains(far.err, "did you mean")) << far.err;

  RunResult range = RunCapsule({"render", cap_, "--context-tokens", "0"});
  EXPECT_EQ(range.exit_code, 2);
  EXPECT_TRUE(Contains(range.err, "--context-tokens: must be a positive whole number, got 0")) << range.err;
  EXPECT_FALSE(Contains(range.err, "179769")) << range.err;
  RunResult choice = RunCapsule({"render", cap_, "--provider", "mistral"});
  EXPECT_EQ(choice.exit_code, 2);
  EXPECT_TRUE(Contains(choice.err, "--provider: must be openai, anthropic or gemini, got mistral")) << choice.err;

  for (const char* command : {"status", "verify", "log", "sql"}) {
    std::vector<std::string> args = {command, root_ + "/nothing"};
    if (std::string(command) == "sql") args.push_back("SELECT 1");
    RunResult missing = RunCapsule(args);
    EXPECT_EQ(missing.exit_code, 1) << command;
    EXPECT_TRUE(Contains(missing.err, root_ + "/nothing: no such file or folder")) << command << ": " << missing.err;
    EXPECT_FALSE(Contains(missing.err, "holder record")) << command << ": " << missing.err;
  }

  // log append --help lists the types and their fields, from the table appends are checked with.
  RunResult help = RunCapsule({"log", "append", "--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_TRUE(Contains(help.out, "fact_remembered     subject* key* value* confidence* source*")) << help.out;
  EXPECT_TRUE(Contains(help.out, "reasoning           provider* model* text* signature encrypted")) << help.out;
}

TEST_F(CliConventionsTest, ExitStatuses) {
  EXPECT_EQ(RunCapsule({"facts", cap_, "nobody"}).exit_code, 1);
  EXPECT_EQ(RunCapsule({"why", cap_, "nobody", "name"}).exit_code, 1);
  EXPECT_EQ(RunCapsule({"facts", cap_, "user"}).exit_code, 0);
  EXPECT_EQ(RunCapsule({"render"}).exit_code, 2);           // usage: DIR is required
  EXPECT_EQ(RunCapsule({"verify", cap_, "--frob"}).exit_code, 2);
  // A missing capsule is "not so" (exit 1): the command line's contract has three statuses.
  EXPECT_EQ(RunCapsule({"verify", root_ + "/nothing"}).exit_code, 1);
  EXPECT_EQ(RunCapsule({"log", root_ + "/nothing"}).exit_code, 1);
}

}  // namespace
}  // namespace capsule
