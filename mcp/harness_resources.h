// The agent's harness as MCP resources (capsule(5), HARNESS; capsule/format/harness.h):
//
//   capsule://AGENT/instructions          harness/instructions.md, the standing instructions
//                                         (text/markdown)
//   capsule://AGENT/skills/NAME           harness/skills/NAME/SKILL.md, the skill
//                                         (text/markdown; its description in resources/list)
//   capsule://AGENT/skills/NAME/FILE      a file the skill keeps beside SKILL.md (UTF-8 text)
//
// read through the folder or mountpoint the server was given, without following a link, each
// in parts like any long text (mcp/reply_bounds.h: "?part=K").
//
// Thread-safety: plain functions over the files.
#pragma once

#include <optional>
#include <string>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::mcp {

// The instructions, when there are any, then every skill by name, as resources/list entries
// appended to `resources`. `base` is "capsule://AGENT/"; `root` the folder or mountpoint served.
// A skill whose SKILL.md cannot be read or whose front matter is bad is left out (capsule
// verify names it); it can still be read by its URI.
void ListHarness(const std::string& root, const std::string& base, Json& resources);

// A harness resource's contents, when `path` (the URI after its base, before any query) names
// one: NotFound when it names nothing there. nullopt when `path` is no harness path at all.
std::optional<Result<Json>> ReadHarness(const std::string& root, const std::string& uri, const std::string& path,
                                        const std::string& query);

// The text at `rel` beneath `root`, a regular file read without following any link, at most
// 16 MiB; NotFound when there is none.
Result<std::string> ReadBeneath(const std::string& root, const std::string& rel);

}  // namespace capsule::mcp
