// A conversation's messages as history_load and a conversation resource give them: one page,
// newest last, bounded by count and by bytes (mcp/reply_bounds.h), each message as
// owned::MessageToJson spells it but with a long content cut and marked:
//
//   "content": its first 64 KiB or so (whole characters),
//   "content_cut": {"bytes": the whole content's length in bytes, "parts": N,
//                   "uri": "capsule://AGENT/messages/ID"}
//
// where the URI, with "?part=K" (K from 0 to N-1; none is part 0), reads the whole content in
// parts (mcp/resources.h).
//
// Thread-safety: one thread at a time (the ports are).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/owned/capsule_ports.h"

namespace capsule::mcp {

inline constexpr int64_t kMaxPageMessages = 1000;

// The URI of a message's whole content: capsule://AGENT/messages/ID.
std::string MessageUri(const std::string& agent, const std::string& message_id);

// The message as JSON, its content cut and marked when long.
Json BoundedMessageJson(const owned::Message& message, const std::string& agent);

// {"conversation", "messages", "next_before_seq"}: the latest messages of `conversation`
// whose seq is below `before_seq` (all when absent), at most `limit` of them and as many as fit
// in kPageBytes (one at least, when there is one); next_before_seq is the cursor to the page
// before, null once the first message is in.
Result<Json> HistoryPage(owned::CapsulePorts& ports, const std::string& agent, const std::string& conversation,
                         int64_t limit, std::optional<int64_t> before_seq);

}  // namespace capsule::mcp
