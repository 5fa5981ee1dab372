#include "mcp/tools.h"

#include "mcp/json_rpc.h"
#include "mcp/json_schema.h"
#include "mcp/reply_bounds.h"

namespace capsule::mcp {

namespace {

Json TextContent(const std::string& text) { return Json::array({{{"type", "text"}, {"text", text}}}); }

Json ErrorResult(const std::string& tool, const Status& status) {
  const std::string message = BoundedMessage(tool + ": " + status.message());
  return {{"content", TextContent(message)},
          {"structuredContent", {{"error", {{"kind", CodeName(status.code())}, {"message", message}}}}},
          {"isError", true}};
}

}  // namespace

const std::vector<Tool>& Tools() {
  static const std::vector<Tool> tools = [] {
    std::vector<Tool> all;
    for (std::vector<Tool> group : {HistoryTools(), MemoryTools(), RunTools(), SearchTools()}) {
      for (Tool& tool : group) all.push_back(std::move(tool));
    }
    return all;
  }();
  return tools;
}

const Tool* FindTool(const std::string& name) {
  for (const Tool& tool : Tools()) {
    if (tool.name == name) return &tool;
  }
  return nullptr;
}

Json ToolListing(const Tool& tool) {
  return {{"name", tool.name},
          {"title", tool.title},
          {"description", tool.description},
          {"inputSchema", tool.input_schema},
          {"annotations",
           {{"title", tool.title},
            {"readOnlyHint", tool.read_only},
            {"destructiveHint", false},
            {"idempotentHint", tool.read_only},
            {"openWorldHint", false}}}};
}

Json CallTool(const Tool& tool, ToolContext& context, const Json& arguments) {
  Status checked = CheckJsonSchema(tool.input_schema, arguments, "arguments");
  if (!checked.ok()) return ErrorResult(tool.name, checked);
  Result<Json> result = tool.run(context, arguments);
  if (!result.ok()) return ErrorResult(tool.name, result.status());
  std::string text = Serialize(*result);
  // Room for the envelope around the text: the id, isError, the keys.
  if (const size_t bytes = JsonTextBytes(text); bytes > kMaxReplyBytes - 4096) {
    return ErrorResult(tool.name, Status::FailedPrecondition("result", "its JSON text is " + std::to_string(bytes) +
                                                                          " bytes, more than a reply holds (1 MiB); "
                                                                          "ask for less"));
  }
  return {{"content", TextContent(text)}};
}

}  // namespace capsule::mcp
