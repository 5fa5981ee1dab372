// Letta's Agent File (.af): one JSON document holding agents, their memory blocks, tools and
// messages (github.com/letta-ai/agent-file). Reading one gives a NewCapsule per agent;
// writing one gives back a capsule as a one-agent file. The mapping is in man/capsule.5,
// AGENT FILE; what has no place in a capsule is refused (the import stops, naming it) or
// listed as dropped (the import goes on, and says so).
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/interop/new_capsule.h"

namespace capsule::journal::interop {

// Whether `document` is an agent file: an object with an "agents" array (the format since
// 2025), or a single agent of the older form (an object with "messages" and "llm_config").
bool LooksLikeAgentFile(const Json& document);

struct AgentFileImport {
  std::vector<NewCapsule> capsules;  // one per agent, in the file's order
  // What the capsules do not keep: "agents[0].files_agents", "tools[*].created_by_id (3)".
  std::vector<std::string> dropped;
  // The secrets' names (their values are never read into a capsule), by agent id.
  std::vector<std::string> secret_names;
};

// The capsules of the agents of `document`: every agent, or only the one whose name (or the
// file's id for it) is `only_agent`. InvalidArgument naming the first thing that cannot be
// placed (a message of a role a journal has no event for, a block label that cannot be a file
// name, an agent named twice, no such agent).
Result<AgentFileImport> ReadAgentFile(const Json& document, const std::optional<std::string>& only_agent);

// The capsule at `capsule_dir` as an agent file holding its one agent (its conversation
// kImportedConversation), in the form of the format's TypeScript types.
Result<Json> WriteAgentFile(const std::string& capsule_dir);

}  // namespace capsule::journal::interop
