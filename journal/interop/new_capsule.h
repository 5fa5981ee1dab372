// A capsule made from another framework's state (a Letta Agent File, a provider's request
// body): what it holds, gathered in memory first, then written whole or not at all.
//
// Thread-safety: values and a function that writes its own folder; safe from any thread.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"
#include "capsule/format/memory_blocks.h"

namespace capsule::journal::interop {

// The conversation every import writes to: the one `capsule render` renders by default.
inline constexpr char kImportedConversation[] = "main";

// One event to append, with the time it happened (UTC RFC 3339, seconds).
struct DatedEvent {
  std::string type;
  Json data;
  std::string ts;
};

struct NewCapsule {
  AgentInfo agent;
  std::string instructions;           // harness/instructions.md; none when empty
  std::vector<MemoryBlock> blocks;    // memory/blocks/<label>.md
  std::vector<DatedEvent> events;     // the journal, in order, on kImportedConversation
  std::map<std::string, std::string> attachments;  // memory/attachments/<sha256>: bytes
  std::optional<std::vector<std::string>> thread_tools;  // harness/threads/main.json "tools"
  Json settings;                      // memory/agent_file.json, when not null
  std::vector<std::string> secret_names;  // environment/spec.json "secrets" (names only)
};

// The agent file's settings capsulefs carries without acting on them (capsule(5), AGENT FILE).
inline constexpr char kAgentFileSettingsPath[] = "memory/agent_file.json";

// Writes `capsules` at `dir` (absent or empty): the one capsule there itself when `nested` is
// false, else each in a folder of `dir` named after its agent id. Everything is made in a
// staging folder beside `dir` and placed in one rename: a refusal leaves nothing.
Status WriteNewCapsules(const std::string& dir, const std::vector<NewCapsule>& capsules, bool nested);

// "2025-10-21T16:55:56.456634+00:00" (any offset, any fraction) as UTC RFC 3339 with seconds:
// "2025-10-21T16:55:56Z". nullopt when it is not such a time.
std::optional<std::string> ToUtcSeconds(const std::string& time);

// An agent id ([A-Za-z0-9._-], 1 to 128, not starting with '.') made from a name: every
// other character becomes '-', "agent" when nothing is left.
std::string AgentIdFromName(const std::string& name);

}  // namespace capsule::journal::interop
