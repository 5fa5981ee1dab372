// Hostile input through the real `capsule` binary: a table of inputs a careless or hostile
// user hands the command line, each with the exit status and the message it must get. None
// may crash (this suite also runs under AddressSanitizer and UndefinedBehaviorSanitizer), and
// after all of them the capsule still verifies and its journal is as it was.
//
// The mount's hostile journal lines and spec writes are in capsulefs_test; hostile peers of
// a sidecar in move_e2e_test; bytes to every reader of outside bytes in the fuzzers.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;

struct Hostile {
  const char* name;
  std::vector<std::string> args;  // {CAP} and {ROOT} stand for the test's capsule and folder
  std::string stdin_text;
  int exit_code;
  std::string message;  // a part of standard error
};

std::string Deep(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("hostile");
    cap_ = root_ + "/cap";
    auto init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_EQ(RunCapsule({"log", "append", cap_, "--type", "user_message", "--data", R"({"text":"hi"})"}).exit_code, 0);
    ASSERT_TRUE(WriteFileAtomic(root_ + "/garbage", std::string(4096, '\x7f')).ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/empty", "").ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/deep.json", "{\"files/a\":" + Deep(100000) + "}").ok());
    ASSERT_EQ(::symlink((root_ + "/garbage").c_str(), (root_ + "/link").c_str()), 0);
  }
  std::string Expand(const std::string& arg) const {
    std::string out = arg;
    for (const auto& [key, value] : {std::pair<std::string, std::string>{"{CAP}", cap_}, {"{ROOT}", root_}}) {
      for (size_t at; (at = out.find(key)) != std::string::npos;) out.replace(at, key.size(), value);
    }
    return out;
  }
  std::string root_, cap_;
};

TEST_F(HostileInputTest, EveryHostileInputGetsAClearErrorAndChangesNothing) {
  const std::string journal_before = *ReadFile(cap_ + "/memory/timeline_events.jsonl");
  const std::vector<Hostile> table = {
      // The journal's data.
      {"a number out of range",
       {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"x","n":1e999})"}, "", 1,
       "the number 1e999 is too large for a double"},
      {"an integer wider than 64 bits",
       {"log", "append", "{CAP}", "--type", "user_message", "--data", R"({"text":"x","n":123456789012345678901234567890})"},
       "", 1, "does not fit in 64 bits"},
      {"nesting 100,000 deep", {"log", "append", "{CAP}", "--type", "user_message"},
       "{\"text\":\"x\",\"d\":" + Deep(100000) + "}", 1, "nested deeper than 256 levels"},
      {"data that is not JSON", {"log", "append", "{CAP}", "--type", "user_message", "--data", "{"}, "", 1,
       "not valid JSON"},
      {"an unknown event type", {"log", "append", "{CAP}", "--type", "chat", "--data", "{}"}, "", 1,
       "unknown event type"},
      {"arguments that are not an object",
       {"log", "append", "{CAP}", "--type", "tool_call", "--data", R"({"call_id":"c","name":"n","arguments":"x"})"}, "",
       1, "data.arguments: must be a JSON object"},
      // Paths and folders.
      {"init over a non-empty folder", {"init", "{CAP}", "--id", "x", "--name", "y"}, "", 1, "is not empty"},
      {"an agent id with a path in it", {"init", "{ROOT}/new", "--id", "../evil", "--name", "y"}, "", 1, "agent id"},
      {"a workspace that is a file",
       {"init", "{ROOT}/new2", "--id", "a", "--name", "y", "--workspace", "{ROOT}/garbage"}, "", 1,
       "workspace source is not a folder"},
      // Outputs.
      {"an export over a symbolic link", {"export", "{CAP}", "-o", "{ROOT}/link"}, "", 1, "is a symbolic link"},
      {"an export into a directory", {"export", "{CAP}", "-o", "{ROOT}"}, "", 1, "is a directory"},
      {"an export into the capsule", {"export", "{CAP}", "-o", "{CAP}/memory/x.tar"}, "", 1, "is inside the capsule"},
      // Foreign bytes.
      {"a tar that is garbage", {"import", "{ROOT}/garbage", "{ROOT}/imported"}, "", 1, "capsule: "},
      {"an empty tar", {"import", "{ROOT}/empty", "{ROOT}/imported"}, "", 1, "capsule: "},
      {"a stream that is garbage", {"stream", "unpack", "{ROOT}/garbage", "{ROOT}/unpacked"}, "", 1, "capsule: "},
      {"a have nested 100,000 deep",
       {"stream", "pack", "{CAP}", "--phase", "copy", "--have", "{ROOT}/deep.json", "-o", "{ROOT}/s"}, "", 1,
       "nested deeper than 256 levels"},
      {"an envelope that is garbage", {"open", "--key", "{ROOT}/garbage"}, std::string(200, 'x'), 1, "capsule: "},
      {"a seal key that is not hex", {"seal", "--to", "zz"}, "data", 1, "capsule: "},
      {"a signing key that is garbage", {"export", "{CAP}", "-o", "{ROOT}/signed.tar", "--sign", "{ROOT}/garbage"}, "",
       1, "not a PEM private key"},
      // Queries.
      {"SQL that writes", {"sql", "{CAP}", "DELETE FROM messages"}, "", 1, "capsule: "},
      {"SQL that is not SQL", {"sql", "{CAP}", "SELEKT"}, "", 1, "capsule: "},
      // The command line's own words (usage: exit 2).
      {"a mistyped command", {"verfy", "{CAP}"}, "", 2, "'verfy' is not a command; did you mean 'verify'?"},
      {"a count of zero", {"render", "{CAP}", "--context-tokens", "0"}, "", 2,
       "--context-tokens: must be a positive whole number, got 0"},
      {"a negative count", {"render", "{CAP}", "--max-tokens", "-5"}, "", 2,
       "--max-tokens: must be a positive whole number, got -5"},
      {"a choice not offered", {"keygen", "--type", "rsa", "-o", "{ROOT}/k"}, "", 2,
       "--type: must be ed25519 or x25519, got rsa"},
      {"a capsule that is not there", {"status", "{ROOT}/absent"}, "", 1, "absent: no such file or folder"},
      // The MCP server.
      {"an MCP server for a folder that is no capsule", {"mcp", "{ROOT}"}, "", 1,
       "neither a capsule folder nor a capsulefs mount"},
  };
  for (const Hostile& row : table) {
    std::vector<std::string> args;
    for (const std::string& arg : row.args) args.push_back(Expand(arg));
    auto run = RunCapsule(args, row.stdin_text);
    EXPECT_EQ(run.exit_code, row.exit_code) << row.name << "\n" << run.err;
    EXPECT_NE(run.err.find(row.message), std::string::npos) << row.name << ": " << run.err;
    // One line per problem, in the form the command line promises.
    EXPECT_EQ(run.err.rfind("capsule: ", 0), 0u) << row.name << ": " << run.err;
  }
  EXPECT_EQ(*ReadFile(cap_ + "/memory/timeline_events.jsonl"), journal_before);
  for (const char* made : {"imported", "unpacked", "new", "new2", "s", "signed.tar"}) {
    EXPECT_FALSE(PathExists(root_ + "/" + made)) << made << " was left behind";
  }
  auto verify = RunCapsule({"verify", cap_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// Hostile lines to `capsule mcp`: each gets exactly one JSON-RPC reply on standard output (an
// error, or a tool result with isError), nothing on standard error, exit 0 at the end of the
// input, and the journal as it was.
TEST_F(HostileInputTest, McpAnswersEveryHostileLineAndWritesNothing) {
  const std::string journal_before = *ReadFile(cap_ + "/memory/timeline_events.jsonl");
  auto call = [](const std::string& arguments) {
    return R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_append","arguments":)" +
           arguments + "}}";
  };
  const std::vector<std::string> lines = {
      "not json",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":" + Deep(100000) + "}",
      R"({"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":1,"method":"ping","params":{"n":1e999}})",
      "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"s\":\"\xC0\xAF\"}}",
      R"([{"jsonrpc":"2.0","id":1,"method":"ping"}])",
      R"({"jsonrpc":"1.0","id":1,"method":"ping"})",
      R"({"jsonrpc":"2.0","id":{},"method":"ping"})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":"x"})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":["history_append"]}})",
      call(R"({"role":"user","content":"x","extra":1})"),
      call(R"({"role":"user","content":["x"]})"),
      call(R"({"role":"tool_call","content":"{","tool_call_id":"c","tool_name":"t"})"),
      call(R"({"role":"user","content":"x","conversation":""})"),
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"memory_remember","arguments":{"subject":"u","key":"k","value":1}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_load","arguments":{"limit":1e300}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"history_load","arguments":{"before_seq":-1}}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"capsule://agent-1/conversations/%"}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"capsule://agent-1/../../etc/passwd"}})",
      R"({"jsonrpc":"2.0","id":1,"method":"resources/list","params":{"cursor":"99999999999999999999"}})",
  };
  std::string input;
  for (const std::string& line : lines) input += line + "\n";
  auto run = RunCapsule({"mcp", cap_}, input);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.err, "");
  size_t replies = 0;
  for (size_t start = 0, end; (end = run.out.find('\n', start)) != std::string::npos; start = end + 1) {
    const std::string reply = run.out.substr(start, end - start);
    EXPECT_TRUE(reply.find("\"error\":{\"code\":-32") != std::string::npos ||
                reply.find("\"isError\":true") != std::string::npos)
        << "line " << replies + 1 << ": " << reply;
    ++replies;
  }
  EXPECT_EQ(replies, lines.size()) << run.out;
  EXPECT_EQ(*ReadFile(cap_ + "/memory/timeline_events.jsonl"), journal_before);
}

}  // namespace
}  // namespace capsule
