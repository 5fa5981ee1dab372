// The MCP tools: one per operation of the history, memory and run ports (journal/owned/ports.h),
// plus the runs in flight and why a fact is believed. man/capsule-mcp.7 lists them with their
// schemas and errors.
//
// A call's arguments are checked against the tool's input schema (mcp/json_schema.h), the
// same object tools/list publishes, before anything runs; a write then goes through
// CapsulePorts, so it is one journal event, appended under the journal's lock and the holder
// record's, like `capsule log append` and a mount's write. A call that fails for any reason
// (arguments, a capsule not held here, a run never opened) is a tool result with isError true
// and a text saying what is wrong; nothing of it is written.
//
// Thread-safety: the catalogue is immutable; a call uses the ports given, one thread at a time.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/owned/capsule_ports.h"

namespace capsule::mcp {

// What a tool runs with: the capsule's ports, and the agent's id (the authority of the resource
// URIs a result names).
struct ToolContext {
  owned::CapsulePorts& ports;
  std::string agent;
};

struct Tool {
  std::string name, title, description;
  Json input_schema;
  bool read_only = false;
  // Runs on arguments already checked against input_schema; returns the structured result.
  std::function<Result<Json>(ToolContext& context, const Json& arguments)> run;
};

// A tool that needs only the ports.
using PortsTool = Result<Json> (*)(owned::CapsulePorts& ports, const Json& arguments);
inline std::function<Result<Json>(ToolContext&, const Json&)> OnPorts(PortsTool run) {
  return [run](ToolContext& context, const Json& arguments) { return run(context.ports, arguments); };
}

// Every tool, in the order tools/list gives them.
const std::vector<Tool>& Tools();
// The tool named `name`, or nullptr.
const Tool* FindTool(const std::string& name);

// The tool as tools/list describes it: name, title, description, inputSchema, annotations.
Json ToolListing(const Tool& tool);

// A tools/call result: {"content":[{"type":"text","text":...}]}, the text the result as compact
// JSON, carried once (no structuredContent: the tools declare no output schema, and the text
// is what every client, a model's host included, reads). A result whose text would not fit a
// reply (mcp/reply_bounds.h) is refused as a failure. A failed call is
// {"content":[{"type":"text","text":"TOOL: what: why"}],"isError":true,
// "structuredContent":{"error":{"kind","message"}}}, its message bounded.
Json CallTool(const Tool& tool, ToolContext& context, const Json& arguments);

// The groups, one file each.
std::vector<Tool> HistoryTools();  // history_tools.cc
std::vector<Tool> MemoryTools();   // memory_tools.cc
std::vector<Tool> RunTools();      // run_tools.cc
std::vector<Tool> SearchTools();   // search_tools.cc

}  // namespace capsule::mcp
