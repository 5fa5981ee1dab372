// How big a reply of `capsule mcp` may grow, and the pieces that keep it so.
//
// No reply line is longer than kMaxReplyBytes (1 MiB), far below what a client's reader takes
// (the official TypeScript SDK drops the connection on a line over 10 MiB). Lists come in
// pages bounded by bytes as well as by count, each with a cursor; a message's content whose
// JSON text is longer than kInlineContentBytes is cut, with a marker naming the resource that
// gives it whole, in parts of at most kPartBytes; an error quotes at most kMaxQuotedBytes of a
// value it is about. man/capsule-mcp.7 (LIMITS) says the same.
//
// Thread-safety: plain functions.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/canonical_json.h"

namespace capsule::mcp {

inline constexpr size_t kMaxReplyBytes = 1 << 20;
// A page of history (history_load, a conversation resource) takes at most this much of a reply.
inline constexpr size_t kPageBytes = 512 << 10;
// A message's content longer than this, as JSON text, is cut in a page.
inline constexpr size_t kInlineContentBytes = 64 << 10;
// One part of a long content, as JSON text, in a resources/read reply.
inline constexpr size_t kPartBytes = 512 << 10;
// The most of a value an error message quotes.
inline constexpr size_t kMaxQuotedBytes = 200;

// How many bytes `text` takes inside a JSON string, as Serialize writes it (UTF-8 kept,
// '"', '\\' and control characters escaped), without the quotes.
size_t JsonTextBytes(std::string_view text);

// The end of the longest prefix of whole characters of `text` from `start` whose JSON text is
// at most `budget` bytes (at least one character when there is one).
size_t PrefixEnd(std::string_view text, size_t start, size_t budget);

// Where `text` is cut into parts of at most `part_bytes` as JSON text, at UTF-8 character
// boundaries: the offset each part starts at (one part, at 0, for a short or empty text).
std::vector<size_t> PartStarts(std::string_view text, size_t part_bytes);

// `text` when it is at most kMaxQuotedBytes long; else its first kMaxQuotedBytes (whole
// characters) and "... (N bytes)".
std::string Excerpt(std::string_view text);
// A JSON value as compact text, through Excerpt.
std::string ExcerptJson(const Json& value);

// An error message of at most about kMaxErrorBytes: a longer one keeps its start and its end
// (the reason), its middle replaced by "... (N bytes) ...".
inline constexpr size_t kMaxErrorBytes = 1024;
std::string BoundedMessage(const std::string& message);

}  // namespace capsule::mcp
