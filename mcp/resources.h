// The MCP resources: what a client reads by URI rather than calls.
//
//   capsule://AGENT/notes                 the agent's own notes, memory/working_memory.md
//                                         (text/markdown), read through the path the server was
//                                         given, so a mount's live file when it is a mountpoint
//   capsule://AGENT/conversations/ID      one conversation's whole history, oldest first
//                                         (application/json: {"conversation","messages"}),
//                                         ID percent-encoded
//
//   capsule://AGENT/messages/ID           a message's whole content (text/plain), in parts
//   capsule://AGENT/instructions, capsule://AGENT/skills/NAME[/FILE]
//                                         the agent's harness (mcp/harness_resources.h)
//
// A text longer than a part (mcp/reply_bounds.h) is read in parts, "?part=K". AGENT is the
// agent's id. resources/list gives the instructions, the skills, the notes, then every
// conversation by id, 100 (and at most 512 KiB) a page.
//
// Thread-safety: one thread at a time (the ports are).
#pragma once

#include <string>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/owned/capsule_ports.h"

namespace capsule::mcp {

struct ResourceSource {
  owned::CapsulePorts* ports = nullptr;
  std::string agent;       // the agent's id, the URIs' authority
  std::string notes_path;  // memory/working_memory.md under the folder or mountpoint served
  std::string served_root;  // that folder or mountpoint: the harness is read beneath it
};

inline constexpr size_t kResourcesPerPage = 100;

// {"resources":[...]} and "nextCursor" when more follow. `cursor` is one a previous page gave
// ("" for the first page); any other is InvalidArgument.
Result<Json> ListResources(const ResourceSource& source, const std::string& cursor);
// {"resourceTemplates":[...]}: the conversation URI with {conversation} in it.
Json ResourceTemplates(const ResourceSource& source);
// {"contents":[{"uri","mimeType","text"}]}; NotFound when the URI names nothing here.
Result<Json> ReadResource(const ResourceSource& source, const std::string& uri);

// Part K of a long text (`query` "part=K", or "" for part 0), as {"contents":[{"uri",
// "mimeType","text","_meta":{"capsule/part","capsule/parts","capsule/offset","capsule/bytes"}}]};
// NotFound for a query that is not part=K or a part past the last.
Result<Json> TextPart(const std::string& uri, const char* mime, const std::string& text, const std::string& query);

// Percent-encoding of everything but RFC 3986's unreserved characters, and back (nullopt when
// a '%' is not followed by two hex digits).
std::string PercentEncode(const std::string& text);
std::optional<std::string> PercentDecode(const std::string& text);

}  // namespace capsule::mcp
