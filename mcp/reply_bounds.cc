#include "mcp/reply_bounds.h"

#include <algorithm>

namespace capsule::mcp {

namespace {

// The bytes of the UTF-8 character starting with `lead` (1 for a byte that starts none).
size_t CharBytes(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

size_t EscapedBytes(unsigned char c) {
  if (c == '"' || c == '\\' || c == '\b' || c == '\f' || c == '\n' || c == '\r' || c == '\t') return 2;
  if (c < 0x20) return 6;  // \u00XX
  return 1;
}

}  // namespace

size_t PrefixEnd(std::string_view text, size_t start, size_t budget) {
  size_t at = start, used = 0;
  while (at < text.size()) {
    size_t n = std::min(CharBytes(static_cast<unsigned char>(text[at])), text.size() - at);
    size_t cost = n == 1 ? EscapedBytes(static_cast<unsigned char>(text[at])) : n;
    if (used + cost > budget && at > start) break;
    used += cost;
    at += n;
  }
  return at;
}

size_t JsonTextBytes(std::string_view text) {
  size_t n = 0;
  for (unsigned char c : text) n += c < 0x80 ? EscapedBytes(c) : 1;
  return n;
}

std::vector<size_t> PartStarts(std::string_view text, size_t part_bytes) {
  std::vector<size_t> starts = {0};
  for (size_t at = PrefixEnd(text, 0, part_bytes); at < text.size(); at = PrefixEnd(text, at, part_bytes)) starts.push_back(at);
  return starts;
}

std::string Excerpt(std::string_view text) {
  if (text.size() <= kMaxQuotedBytes) return std::string(text);
  size_t end = kMaxQuotedBytes;
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + "... (" + std::to_string(text.size()) + " bytes)";
}

std::string ExcerptJson(const Json& value) {
  return Excerpt(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

std::string BoundedMessage(const std::string& message) {
  if (message.size() <= kMaxErrorBytes) return message;
  const size_t head = PrefixEnd(message, 0, kMaxErrorBytes / 2);
  size_t tail = message.size() - kMaxErrorBytes / 4;
  while (tail < message.size() && (static_cast<unsigned char>(message[tail]) & 0xC0) == 0x80) ++tail;
  return message.substr(0, head) + " ... (" + std::to_string(message.size()) + " bytes) ... " + message.substr(tail);
}

}  // namespace capsule::mcp
