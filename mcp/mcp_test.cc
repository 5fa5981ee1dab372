// The MCP server in process: the JSON-RPC framing and its errors, the schema checker, every
// tool and resource, refusals that write nothing, and the stream loop's long-line rule.
// tests/mcp/ drives the real binary with the official TypeScript SDK's client.
#include <fcntl.h>
#include <unistd.h>

#include <thread>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/test_util.h"
#include "mcp/json_schema.h"
#include "mcp/server.h"
#include "mcp/tools.h"

namespace capsule::mcp {
namespace {

using journal::testing::MachineName;
using journal::testing::MakeTempDir;
using journal::testing::MakeTestCapsule;

class McpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("mcp") + "/cap";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kWorkingMemoryPath), "# Notes\nthe user likes tea\n").ok());
    Result<std::unique_ptr<Server>> server = Server::Open({dir_, dir_, {}});
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }

  // Sends one line; returns the reply parsed (null when there is none).
  Json Send(const std::string& line) {
    std::optional<std::string> reply = server_->HandleLine(line);
    if (!reply) return nullptr;
    EXPECT_EQ(reply->find('\n'), std::string::npos) << *reply;
    Result<Json> parsed = ParseJson(*reply, "reply");
    EXPECT_TRUE(parsed.ok()) << *reply;
    return parsed.ok() ? *parsed : Json(nullptr);
  }
  Json Request(const std::string& method, const Json& params) {
    Json request = {{"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", params}};
    Json reply = Send(request.dump());
    EXPECT_EQ(reply["id"], id_) << reply.dump();
    return reply;
  }
  // A tools/call's result (the reply's "result").
  Json Call(const std::string& tool, const Json& arguments) {
    Json reply = Request("tools/call", {{"name", tool}, {"arguments", arguments}});
    EXPECT_TRUE(reply.contains("result")) << reply.dump();
    return reply["result"];
  }
  // A call that must succeed: its result, carried once, as the JSON text of its one content block.
  Json Ok(const std::string& tool, const Json& arguments) {
    Json result = Call(tool, arguments);
    EXPECT_FALSE(result.value("isError", false)) << tool << ": " << result.dump();
    EXPECT_FALSE(result.contains("structuredContent")) << tool;
    EXPECT_EQ(result["content"].size(), 1u);
    Result<Json> parsed = ParseJson(result["content"][0]["text"].get<std::string>(), "result");
    EXPECT_TRUE(parsed.ok()) << result.dump();
    return parsed.ok() ? *parsed : Json(nullptr);
  }
  // A call that must fail as a tool error: its text.
  std::string Refused(const std::string& tool, const Json& arguments) {
    Json result = Call(tool, arguments);
    EXPECT_TRUE(result.value("isError", false)) << tool << ": " << result.dump();
    return result["content"][0]["text"].get<std::string>();
  }
  size_t JournalLines() {
    Result<std::vector<journal::Event>> events = journal::Journal::Read(dir_);
    EXPECT_TRUE(events.ok());
    return events.ok() ? events->size() : 0;
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  int id_ = 0;
};

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(JsonSchemaTest, ChecksWhatTheToolSchemasUse) {
  Json schema = {{"type", "object"},
                 {"properties",
                  {{"n", {{"type", "integer"}, {"minimum", 1}, {"maximum", 10}}},
                   {"s", {{"type", "string"}, {"minLength", 1}, {"maxLength", 3}}},
                   {"id", {{"type", "string"}, {"maxLength", 4}, {"pattern", "^[0-9a-f]{4}$"}}},
                   {"e", {{"enum", Json::array({"a", "b"})}}},
                   {"v", {{"type", Json::array({"string", "number"})}}},
                   {"list", {{"type", "array"}, {"items", {{"type", "string"}}}, {"maxItems", 2}}}}},
                 {"required", Json::array({"n"})},
                 {"additionalProperties", false}};
  EXPECT_TRUE(SchemaKeywordsKnown(schema).ok());
  EXPECT_TRUE(CheckJsonSchema(schema, {{"n", 3}, {"s", "ab"}, {"id", "00af"}, {"e", "b"}, {"v", 2.5}}).ok());
  EXPECT_TRUE(CheckJsonSchema(schema, {{"n", 3.0}}).ok());  // 3.0 is an integer
  auto fault = [&](const Json& value) { return CheckJsonSchema(schema, value).message(); };
  EXPECT_EQ(fault(Json::object()), "arguments.n: missing (required)");
  EXPECT_EQ(fault({{"n", "3"}}), "arguments.n: must be an integer (got a string)");
  EXPECT_EQ(fault({{"n", 3.5}}), "arguments.n: must be an integer (got a number)");
  EXPECT_EQ(fault({{"n", 0}}), "arguments.n: must be at least 1 (got 0)");
  EXPECT_EQ(fault({{"n", 11}}), "arguments.n: must be at most 10 (got 11)");
  EXPECT_EQ(fault({{"n", 1}, {"s", ""}}), "arguments.s: must not be empty");
  EXPECT_EQ(fault({{"n", 1}, {"s", "abcd"}}), "arguments.s: must be at most 3 characters long (got 4)");
  EXPECT_TRUE(CheckJsonSchema(schema, {{"n", 1}, {"s", "\xC3\xA9\xC3\xA9\xC3\xA9"}}).ok());  // code points, not bytes
  EXPECT_EQ(fault({{"n", 1}, {"id", "00AF"}}), "arguments.id: must match ^[0-9a-f]{4}$ (got \"00AF\")");
  EXPECT_EQ(fault({{"n", 1}, {"e", "c"}}), "arguments.e: must be one of \"a\", \"b\" (got \"c\")");
  EXPECT_EQ(fault({{"n", 1}, {"v", nullptr}}), "arguments.v: must be a string or a number (got null)");
  EXPECT_EQ(fault({{"n", 1}, {"list", {"a", 2}}}), "arguments.list[1]: must be a string (got an integer)");
  EXPECT_EQ(fault({{"n", 1}, {"list", {"a", "b", "c"}}}), "arguments.list: must hold at most 2 items (got 3)");
  EXPECT_EQ(fault({{"n", 1}, {"x", 1}}), "arguments: unknown argument \"x\" (known: e, id, list, n, s, v)");
  EXPECT_EQ(fault(Json::array()), "arguments: must be an object (got an array)");

  Json conditional = {{"type", "object"},
                      {"if", {{"properties", {{"kind", {{"const", "a"}}}}}}},
                      {"then", {{"description", "kind a needs x"}, {"required", Json::array({"x"})}}},
                      {"else", {{"properties", {{"x", false}}}}}};
  EXPECT_TRUE(CheckJsonSchema(conditional, {{"kind", "a"}, {"x", 1}}).ok());
  EXPECT_EQ(CheckJsonSchema(conditional, {{"kind", "a"}}).message(), "arguments.x: missing (required); kind a needs x");
  EXPECT_EQ(CheckJsonSchema(conditional, {{"kind", "b"}, {"x", 1}}).message(), "arguments.x: is not allowed");

  Json negated = {{"type", "object"},
                  {"properties", {{"v", {{"not", {{"type", "null"}}}}}, {"w", {{"not", Json::object()}}}}}};
  EXPECT_TRUE(SchemaKeywordsKnown(negated).ok());
  EXPECT_TRUE(CheckJsonSchema(negated, {{"v", 0}}).ok());
  EXPECT_EQ(CheckJsonSchema(negated, {{"v", nullptr}}).message(), "arguments.v: must not be null");
  EXPECT_EQ(CheckJsonSchema(negated, {{"w", 1}}).message(), "arguments.w: is not allowed");
  EXPECT_FALSE(SchemaPortable(conditional).ok());  // its bare false
  EXPECT_FALSE(SchemaPortable(schema).ok());       // its type list
  EXPECT_TRUE(SchemaPortable(negated).ok());

  EXPECT_FALSE(SchemaKeywordsKnown({{"type", "string"}, {"oneOf", Json::array()}}).ok());
  EXPECT_FALSE(SchemaKeywordsKnown({{"type", "string"}, {"pattern", "^a$"}}).ok());  // unbounded subject
}

TEST(JsonSchemaTest, EveryToolSchemaIsExactAndChecked) {
  ASSERT_EQ(Tools().size(), 11u);
  for (const Tool& tool : Tools()) {
    SCOPED_TRACE(tool.name);
    EXPECT_TRUE(SchemaKeywordsKnown(tool.input_schema).ok()) << SchemaKeywordsKnown(tool.input_schema).message();
    EXPECT_TRUE(SchemaPortable(tool.input_schema).ok()) << SchemaPortable(tool.input_schema).message();
    EXPECT_EQ(tool.input_schema["type"], "object");
    EXPECT_EQ(tool.input_schema["additionalProperties"], false);
    for (const std::string& name : tool.input_schema.value("required", std::vector<std::string>())) {
      EXPECT_TRUE(tool.input_schema["properties"].contains(name)) << name;
    }
    EXPECT_FALSE(tool.description.empty());
  }
}

TEST_F(McpTest, InitializeNegotiatesTheRevision) {
  Json reply = Request("initialize", {{"protocolVersion", "2025-11-25"}, {"capabilities", Json::object()},
                                      {"clientInfo", {{"name", "t"}, {"version", "1"}}}});
  EXPECT_EQ(reply["result"]["protocolVersion"], "2025-11-25");
  EXPECT_TRUE(reply["result"]["capabilities"].contains("tools"));
  EXPECT_TRUE(reply["result"]["capabilities"].contains("resources"));
  EXPECT_EQ(reply["result"]["serverInfo"]["name"], "capsule");
  EXPECT_EQ(Request("initialize", {{"protocolVersion", "2025-06-18"}})["result"]["protocolVersion"], "2025-06-18");
  EXPECT_EQ(Request("initialize", {{"protocolVersion", "1999-01-01"}})["result"]["protocolVersion"], "2025-11-25");
  EXPECT_EQ(Request("initialize", Json::object())["error"]["code"], kInvalidParams);
  EXPECT_TRUE(Send(R"({"jsonrpc":"2.0","method":"notifications/initialized"})").is_null());
  EXPECT_EQ(Request("ping", nullptr)["result"], Json::object());
}

TEST_F(McpTest, MalformedLinesGetErrorRepliesAndTheServerGoesOn) {
  Json parse = Send("{\"jsonrpc\":\"2.0\",\"id\":");
  EXPECT_EQ(parse["error"]["code"], kParseError);
  EXPECT_TRUE(parse["id"].is_null());  // no id to read (mcp/line_refusals_test.cc has those that have one)
  EXPECT_EQ(Send("[1,2]")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(Send("42")["error"]["code"], kInvalidRequest);
  Json version = Send(R"({"id":7,"method":"ping"})");
  EXPECT_EQ(version["error"]["code"], kInvalidRequest);
  EXPECT_EQ(version["id"], 7);
  EXPECT_EQ(Send(R"({"jsonrpc":"2.0","id":null,"method":"ping"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(Send(R"({"jsonrpc":"2.0","id":1.5,"method":"ping"})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(Send(R"({"jsonrpc":"2.0","id":2,"method":7})")["error"]["code"], kInvalidRequest);
  EXPECT_EQ(Send(R"({"jsonrpc":"2.0","id":"a","method":"nope"})")["error"]["code"], kMethodNotFound);
  EXPECT_EQ(Send(R"({"jsonrpc":"2.0","id":3,"method":"tools/list","params":[1]})")["error"]["code"], kInvalidParams);
  EXPECT_TRUE(Send(R"({"jsonrpc":"2.0","id":9,"result":{}})").is_null());  // a response: dropped
  EXPECT_TRUE(Send(R"({"jsonrpc":"2.0","method":"notifications/whatever"})").is_null());
  EXPECT_TRUE(Send("   ").is_null());
  EXPECT_EQ(Send("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\",\"params\":{\"x\":\"\xFF\"}}")["error"]["code"],
            kParseError);  // not UTF-8
  EXPECT_EQ(Request("tools/list", Json::object())["result"]["tools"].size(), 11u);
}

TEST_F(McpTest, EveryToolThroughTheServer) {
  Json user = Ok("history_append", {{"role", "user"}, {"content", "I write in French"}})["message"];
  EXPECT_EQ(user["seq"], 1);
  EXPECT_EQ(user["role"], "user");
  Ok("history_append", {{"role", "assistant"}, {"content", "D'accord."}, {"provider", "anthropic"}, {"model", "m1"}});
  Ok("history_append", {{"role", "tool_call"}, {"content", R"({"q":"tea"})"}, {"tool_call_id", "c1"}, {"tool_name", "search"}});
  Ok("history_append", {{"role", "tool"}, {"content", "found"}, {"tool_call_id", "c1"}, {"is_error", false}});

  Json page = Ok("history_load", {{"limit", 2}});
  ASSERT_EQ(page["messages"].size(), 2u);
  EXPECT_EQ(page["messages"][0]["seq"], 3);
  EXPECT_EQ(page["messages"][1]["seq"], 4);  // newest last
  EXPECT_EQ(page["next_before_seq"], 3);
  Json older = Ok("history_load", {{"limit", 2}, {"before_seq", 3}});
  EXPECT_EQ(older["messages"][0]["content"], "I write in French");
  EXPECT_TRUE(older["next_before_seq"].is_null());
  EXPECT_EQ(Ok("history_load", Json::object())["messages"].size(), 4u);

  const std::string source = user["id"];
  Json fact = Ok("memory_remember", {{"subject", "user"}, {"key", "language"}, {"value", "fr"}, {"source", source},
                                     {"confidence", 0.8}})["fact"];
  EXPECT_EQ(fact["value"], "fr");
  EXPECT_EQ(fact["source"], source);
  Json recalled = Ok("memory_recall", {{"subject", "user"}});
  ASSERT_EQ(recalled["facts"].size(), 1u);
  EXPECT_EQ(recalled["facts"][0]["key"], "language");
  EXPECT_EQ(Ok("memory_recall", {{"subject", "user"}, {"keys", {"other"}}})["facts"].size(), 0u);
  EXPECT_EQ(Ok("memory_recall", {{"subject", "user"}, {"as_of", "2000-01-01T00:00:00Z"}})["facts"].size(), 0u);
  Json why = Ok("memory_why", {{"subject", "user"}, {"key", "language"}});
  EXPECT_EQ(why["source"]["message"]["content"], "I write in French");
  Json expired = Ok("memory_expire", {{"subject", "user"}, {"key", "language"}, {"source", source}})["fact"];
  EXPECT_FALSE(expired["valid_to"].is_null());
  EXPECT_EQ(Ok("memory_recall", {{"subject", "user"}})["facts"].size(), 0u);
  EXPECT_TRUE(Contains(Refused("memory_why", {{"subject", "user"}, {"key", "language"}}), "not believed now"));

  Json run = Ok("run_open", {{"run_id", "r1"}, {"framework", "fw-a"}, {"thread_key", "t1"}})["run"];
  EXPECT_EQ(run["status"], "running");
  EXPECT_EQ(Ok("run_mark_awaiting", {{"run_id", "r1"}, {"awaiting", "approval"}})["run"]["awaiting"], "approval");
  Json flying = Ok("runs_in_flight", Json::object())["runs"];
  ASSERT_EQ(flying.size(), 1u);
  EXPECT_EQ(flying[0]["run_id"], "r1");
  Json closed = Ok("run_close", {{"run_id", "r1"}, {"status", "done"}, {"cost", 0.25}})["run"];
  EXPECT_EQ(closed["status"], "done");
  EXPECT_EQ(Ok("runs_in_flight", Json::object())["runs"].size(), 0u);
}

TEST_F(McpTest, BadArgumentsAreToolErrorsThatWriteNothing) {
  const size_t before = JournalLines();
  EXPECT_TRUE(Contains(Refused("history_append", {{"content", "x"}}), "arguments.role: missing"));
  EXPECT_TRUE(Contains(Refused("history_append", {{"role", "robot"}, {"content", "x"}}), "must be one of"));
  EXPECT_TRUE(Contains(Refused("history_append", {{"role", "user"}, {"content", 5}}), "arguments.content: must be a string"));
  EXPECT_TRUE(Contains(Refused("history_append", {{"role", "tool_call"}, {"content", "[1]"}, {"tool_call_id", "c"},
                                                  {"tool_name", "t"}}),
                       "JSON object"));
  EXPECT_TRUE(Contains(Refused("history_load", {{"limit", 0}}), "arguments.limit: must be at least 1"));
  EXPECT_TRUE(Contains(Refused("memory_remember", {{"subject", "user"}, {"key", "k"}, {"value", 1}}),
                       "arguments.source: missing (required: Provenance"));
  EXPECT_TRUE(Contains(Refused("memory_remember", {{"subject", "user"}, {"key", "k"}, {"value", 1},
                                                   {"source", std::string(64, 'a')}}),
                       "is not an event of the journal"));
  EXPECT_TRUE(Contains(Refused("memory_remember", {{"subject", "user"}, {"key", "k"}, {"value", nullptr},
                                                   {"source", std::string(64, 'a')}}),
                       "arguments.value: must not be null"));
  EXPECT_TRUE(Contains(Refused("memory_recall", {{"subject", "user"}, {"as_of", "yesterday"}}), "arguments.as_of: must match"));
  EXPECT_TRUE(Contains(Refused("run_mark_awaiting", {{"run_id", "ghost"}, {"awaiting", "x"}}), "never opened"));
  EXPECT_TRUE(Contains(Refused("runs_in_flight", {{"all", true}}), "this tool takes none"));
  EXPECT_EQ(Request("tools/call", {{"name", "no_such_tool"}})["error"]["code"], kInvalidParams);
  EXPECT_EQ(Request("tools/call", {{"arguments", Json::object()}})["error"]["code"], kInvalidParams);
  EXPECT_EQ(Request("tools/call", {{"name", "history_load"}, {"arguments", "x"}})["error"]["code"], kInvalidParams);
  EXPECT_EQ(JournalLines(), before);
}

TEST_F(McpTest, WritesNeedTheCapsuleHeldHereAndReadsDoNot) {
  Ok("history_append", {{"role", "user"}, {"content", "before the move"}});
  for (HolderState state : {HolderState::kFrozen, HolderState::kRetired}) {
    ASSERT_TRUE(TransitionHolder(dir_, {{HolderState::kActive}, state, ""}).ok());
    const size_t before = JournalLines();
    const size_t messages = Ok("history_load", Json::object())["messages"].size();  // reading never needs it held
    std::string why = Refused("history_append", {{"role", "user"}, {"content", "after"}});
    EXPECT_TRUE(Contains(why, state == HolderState::kFrozen ? "frozen at epoch" : "retired here at epoch")) << why;
    EXPECT_TRUE(Contains(Refused("run_open", {{"run_id", "r"}, {"framework", "f"}, {"thread_key", "t"}}),
                         state == HolderState::kFrozen ? "thaw it first" : "read-only"));
    EXPECT_EQ(JournalLines(), before);
    EXPECT_EQ(Ok("history_load", Json::object())["messages"].size(), messages);
    if (state == HolderState::kFrozen) {  // a thaw lets writes go on
      ASSERT_TRUE(TransitionHolder(dir_, {{HolderState::kFrozen}, HolderState::kActive, ""}).ok());
      Ok("history_append", {{"role", "user"}, {"content", "thawed"}});
    }
  }
}

TEST_F(McpTest, ResourcesAreTheNotesAndEachConversation) {
  Ok("history_append", {{"role", "user"}, {"content", "hello"}});
  Ok("history_append", {{"role", "user"}, {"content", "bonjour"}, {"conversation", "fr/1 x"}});
  Json listed = Request("resources/list", Json::object())["result"]["resources"];
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(listed[0]["uri"], "capsule://agent-1/notes");
  EXPECT_EQ(listed[1]["uri"], "capsule://agent-1/conversations/fr%2F1%20x");
  EXPECT_EQ(listed[2]["uri"], "capsule://agent-1/conversations/main");
  Json notes = Request("resources/read", {{"uri", "capsule://agent-1/notes"}})["result"]["contents"][0];
  EXPECT_EQ(notes["mimeType"], "text/markdown");
  EXPECT_EQ(notes["text"], "# Notes\nthe user likes tea\n");
  Json conversation = Request("resources/read", {{"uri", listed[1]["uri"]}})["result"]["contents"][0];
  Result<Json> body = ParseJson(conversation["text"].get<std::string>(), "conversation");
  ASSERT_TRUE(body.ok());
  EXPECT_EQ((*body)["conversation"], "fr/1 x");
  EXPECT_EQ((*body)["messages"][0]["content"], "bonjour");
  for (const char* uri : {"capsule://agent-1/conversations/none", "capsule://other/notes", "capsule://agent-1/x",
                          "capsule://agent-1/conversations/%zz"}) {
    Json reply = Request("resources/read", {{"uri", uri}});
    EXPECT_EQ(reply["error"]["code"], kResourceNotFound) << uri;
  }
  EXPECT_EQ(Request("resources/read", Json::object())["error"]["code"], kInvalidParams);
  EXPECT_EQ(Request("resources/list", {{"cursor", "bogus"}})["error"]["code"], kInvalidParams);
  EXPECT_EQ(Request("resources/templates/list", nullptr)["result"]["resourceTemplates"][0]["uriTemplate"],
            "capsule://agent-1/conversations/{conversation}");
}

TEST_F(McpTest, ResourcesListInPages) {
  for (int i = 0; i < 130; ++i) {
    Ok("history_append", {{"role", "user"}, {"content", "x"}, {"conversation", "c" + std::to_string(1000 + i)}});
  }
  Json first = Request("resources/list", Json::object())["result"];
  EXPECT_EQ(first["resources"].size(), 1 + kResourcesPerPage);  // the notes, then conversations
  Json second = Request("resources/list", {{"cursor", first["nextCursor"]}})["result"];
  EXPECT_EQ(second["resources"].size(), 130 - kResourcesPerPage);
  EXPECT_FALSE(second.contains("nextCursor"));
}

TEST_F(McpTest, ServeAnswersLineByLineAndSkipsALineTooLong) {
  int in[2], out[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(out), 0);
  std::thread writer([&] {
    std::string big(kMaxLine + 10, 'x');
    std::string text = R"({"jsonrpc":"2.0","id":1,"method":"ping"})" "\r\n" + big + "\n" +
                       R"({"jsonrpc":"2.0","id":2,"method":"ping"})";  // the last line has no newline
    (void)WriteAll(in[1], text, "pipe");
    ::close(in[1]);
  });
  std::string replies;
  std::thread reader([&] {
    char buffer[4096];
    for (ssize_t n; (n = ::read(out[0], buffer, sizeof buffer)) > 0;) replies.append(buffer, static_cast<size_t>(n));
  });
  EXPECT_TRUE(server_->Serve(in[0], out[1]).ok());
  ::close(out[1]);
  writer.join();
  reader.join();
  ::close(in[0]);
  ::close(out[0]);
  EXPECT_EQ(replies,
            "{\"id\":1,\"jsonrpc\":\"2.0\",\"result\":{}}\n"
            "{\"error\":{\"code\":-32600,\"message\":\"Invalid Request: a line longer than 16 MiB; skipped\"},"
            "\"id\":null,\"jsonrpc\":\"2.0\"}\n"
            "{\"id\":2,\"jsonrpc\":\"2.0\",\"result\":{}}\n");
}

}  // namespace
}  // namespace capsule::mcp
