// The members of an agent file's objects this build knows, as the format's TypeScript types
// name them (the Letta client's serialization types, AgentFileSchema and what it holds): the
// known ones are mapped or carried; any other that holds something is listed as dropped.
//
// Thread-safety: constant tables.
#pragma once

#include <set>
#include <string>

namespace capsule::journal::interop {

// The file itself.
const std::set<std::string>& FileFields();
// An agent: every member the reader maps, carries or lists by name.
const std::set<std::string>& AgentFields();
// The agent's settings carried whole into memory/agent_file.json and written back on export.
const std::set<std::string>& CarriedAgentFields();
const std::set<std::string>& LlmConfigFields();
const std::set<std::string>& BlockFields();
// A block's members besides label, description, value, limit, read_only and id, carried.
const std::set<std::string>& CarriedBlockFields();
const std::set<std::string>& ToolFields();
// A tool's members carried in its tool_defined event's "letta" (besides its id).
const std::set<std::string>& CarriedToolFields();
const std::set<std::string>& MessageFields();
// A message's members carried in each of its events' "letta".
const std::set<std::string>& CarriedMessageFields();

}  // namespace capsule::journal::interop
