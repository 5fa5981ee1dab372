// history_load and history_append: the history port.
#include <cstdint>

#include "mcp/history_page.h"
#include "mcp/schema_parts.h"
#include "mcp/tools.h"

namespace capsule::mcp {

namespace {

constexpr int64_t kDefaultPage = 50;

std::optional<std::string> OptionalString(const Json& arguments, const char* name) {
  auto it = arguments.find(name);
  if (it == arguments.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

Result<Json> Load(ToolContext& context, const Json& arguments) {
  const int64_t limit = arguments.contains("limit") ? arguments["limit"].get<int64_t>() : kDefaultPage;
  std::optional<int64_t> before;
  if (arguments.contains("before_seq")) before = arguments["before_seq"].get<int64_t>();
  return HistoryPage(context.ports, context.agent, arguments.value("conversation", "main"), limit, before);
}

Result<Json> Append(ToolContext& context, const Json& arguments) {
  owned::Message message;
  message.conversation = arguments.value("conversation", "main");
  message.role = arguments["role"].get<std::string>();
  message.content = arguments["content"].get<std::string>();
  message.tool_call_id = OptionalString(arguments, "tool_call_id");
  message.tool_name = OptionalString(arguments, "tool_name");
  if (arguments.contains("is_error")) message.is_error = arguments["is_error"].get<bool>();
  message.provider = OptionalString(arguments, "provider");
  message.model = OptionalString(arguments, "model");
  message.run_id = OptionalString(arguments, "run_id");
  if (message.role == "tool_call") {
    // Its content is the call's arguments: a JSON object, checked before anything is written.
    Result<Json> call_arguments = ParseJson(message.content, "content");
    if (!call_arguments.ok()) return call_arguments.status();
    if (!call_arguments->is_object()) {
      return Status::InvalidArgument("content", "a tool_call's content must be its arguments as a JSON object");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(owned::Message stored, context.ports.Append(message));
  return Json{{"message", BoundedMessageJson(stored, context.agent)}};
}

// The schema no value satisfies, as an object ({"not": {}}): a bare false is not portable.
Json Forbidden() { return {{"not", Json::object()}}; }

// Fields a role takes, and those it refuses: the schema says exactly what Append accepts.
Json RoleRule(const std::string& role, const std::vector<std::string>& required, const std::vector<std::string>& refused,
              const std::string& when, const std::string& otherwise) {
  Json rule = {{"if", {{"properties", {{"role", {{"const", role}}}}}, {"required", Json::array({"role"})}}}};
  if (!required.empty()) rule["then"] = {{"description", when}, {"required", required}};
  if (!refused.empty()) {
    Json forbidden = Json::object();
    for (const std::string& name : refused) forbidden[name] = Forbidden();
    rule["else"] = {{"description", otherwise}, {"properties", forbidden}};
  }
  return rule;
}

Json AppendSchema() {
  Json schema = ObjectSchema(
      {{"conversation", ConversationSchema()},
       {"role",
        {{"type", "string"},
         {"enum", Json::array({"system", "user", "assistant", "tool_call", "tool"})},
         {"description", "Who speaks: system, user, assistant, tool_call (a call the assistant made) or tool (its result)"}}},
       {"content", TextSchema("The message's text; for a tool_call, its arguments as a JSON object in text")},
       {"tool_call_id", NameSchema("tool_call and tool: the call's id, which pairs a result with its call")},
       {"tool_name", NameSchema("tool_call: the tool called")},
       {"is_error", {{"type", "boolean"}, {"description", "tool: the result is an error (default false)"}}},
       {"provider", NameSchema("assistant: the model's provider, e.g. anthropic")},
       {"model", NameSchema("assistant: the model that wrote it")},
       {"run_id", NameSchema("The run this message is a step of, if any")}},
      {"role", "content"});
  schema["allOf"] = Json::array(
      {RoleRule("assistant", {"provider", "model"}, {"provider", "model"}, "role assistant needs provider and model",
                "provider and model are for role assistant only"),
       RoleRule("tool_call", {"tool_call_id", "tool_name"}, {"tool_name"}, "role tool_call needs tool_call_id and tool_name",
                "tool_name is for role tool_call only"),
       RoleRule("tool", {"tool_call_id"}, {"is_error"}, "role tool needs tool_call_id", "is_error is for role tool only"),
       {{"if", {{"properties", {{"role", {{"enum", Json::array({"tool_call", "tool"})}}}}}, {"required", Json::array({"role"})}}},
        {"else",
         {{"description", "tool_call_id is for roles tool_call and tool only"},
          {"properties", {{"tool_call_id", Forbidden()}}}}}}});
  return schema;
}

}  // namespace

std::vector<Tool> HistoryTools() {
  return {
      Tool{"history_load", "Load a conversation's history",
           "The messages of a conversation, oldest first and newest last, one page at a time: the latest `limit` "
           "messages (default 50) whose seq is below `before_seq` (default: all), as many as fit in 512 KiB. To "
           "read further back, call again with before_seq set to the page's next_before_seq, which is null once the "
           "first message is in. A content longer than 64 KiB is cut: the message's content_cut then gives its "
           "length in bytes and the resource URI that reads it whole, in parts (uri?part=0 to parts-1).",
           ObjectSchema({{"conversation", ConversationSchema()},
                         {"limit",
                          {{"type", "integer"},
                           {"minimum", 1},
                           {"maximum", kMaxPageMessages},
                           {"default", kDefaultPage},
                           {"description", "Messages per page, 1 to 1000 (default 50)"}}},
                         {"before_seq",
                          {{"type", "integer"},
                           {"minimum", 1},
                           {"description", "Only messages whose seq is below this (the previous page's next_before_seq)"}}}},
                        {}),
           true, Load},
      Tool{"history_append", "Append a message",
           "Appends one message to a conversation as a journal event: hash-chained, durable (synced before the reply) "
           "and projected like any other. Returns it with its id (an event id, usable as a fact's source), seq, ts and "
           "tokens (a long content cut as history_load cuts it). Refused when this machine does not hold the agent "
           "(frozen or retired).",
           AppendSchema(), false, Append},
  };
}

}  // namespace capsule::mcp
