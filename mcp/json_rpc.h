// JSON-RPC 2.0 as MCP's stdio transport carries it: one message per line, UTF-8, no batches
// (the protocol revisions this server speaks dropped them).
//
// A line is sorted into a request (a method and an id: it gets exactly one reply), a
// notification (a method and no id: never a reply) or a response (a result or an error for an
// id: this server sends no requests, so it reads and drops them). Anything else gets an error
// reply built here: text that is not JSON (or JSON over the limits of capsule/base/canonical_json.h:
// nesting, integers over 64 bits; or a lone surrogate escape), -32700 with the id of the
// request when a tolerant scan of the line finds its top-level "id" (a string or an integer),
// else id null; JSON that is not one request
// object (an array, a wrong "jsonrpc", an id that is null, fractional, or neither a string nor
// a number, a method that is not a string), -32600 with the id when one could be read.
//
// Thread-safety: plain functions.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "capsule/base/canonical_json.h"

namespace capsule::mcp {

inline constexpr int kParseError = -32700;
inline constexpr int kInvalidRequest = -32600;
inline constexpr int kMethodNotFound = -32601;
inline constexpr int kInvalidParams = -32602;
inline constexpr int kInternalError = -32603;
inline constexpr int kResourceNotFound = -32002;  // MCP: resources/read of an unknown URI

struct Incoming {
  enum class Kind { kRequest, kNotification, kResponse };
  Kind kind = Kind::kNotification;
  Json id;  // a string or an integer (requests and responses)
  std::string method;
  Json params = Json::object();  // as sent; null when absent
};

// One line read: the message, or the error reply to send for it.
struct ReadLine {
  std::optional<Incoming> message;
  std::optional<Json> error_reply;
};

ReadLine ParseLine(std::string_view line);

Json ResultReply(const Json& id, Json result);
// `message` bounded to about 1 KiB (mcp/reply_bounds.h, BoundedMessage).
Json ErrorReply(const Json& id, int code, const std::string& message);

// The message as one line, without its newline. Never throws: bytes that are not UTF-8 (none
// should reach here) are written as U+FFFD.
std::string Serialize(const Json& message);

}  // namespace capsule::mcp
