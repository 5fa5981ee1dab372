#include "mcp/json_rpc.h"

#include "mcp/reply_bounds.h"

namespace capsule::mcp {

namespace {

// A tolerant reader of a line JSON refused, for the one thing a reply needs from it: the value
// of the top-level "id" member. It walks the top-level object member by member, skipping each
// value by its brackets and strings without looking inside (so a fault deep in "params" does not
// hide the id), and stops at the first thing it cannot read. Linear in the line, no recursion.
class IdScanner {
 public:
  explicit IdScanner(std::string_view text) : text_(text) {}

  std::optional<Json> Find() {
    Space();
    if (!Take('{')) return std::nullopt;
    for (;;) {
      Space();
      const size_t key_start = at_;
      if (!SkipString()) return std::nullopt;
      const std::string_view key = text_.substr(key_start, at_ - key_start);
      Space();
      if (!Take(':')) return std::nullopt;
      Space();
      const size_t value_start = at_;
      if (!SkipValue()) return std::nullopt;
      if (key == "\"id\"") return ReadId(text_.substr(value_start, at_ - value_start));
      Space();
      if (!Take(',')) return std::nullopt;  // '}' ends the object, and no id was in it
    }
  }

 private:
  // The id when it is one a reply can carry: a string (within the bound of a quote) or an
  // integer that fits in 64 bits.
  static std::optional<Json> ReadId(std::string_view token) {
    if (token.empty() || token.size() > kMaxQuotedBytes) return std::nullopt;
    Json id = Json::parse(token.begin(), token.end(), nullptr, /*allow_exceptions=*/false);
    if (id.is_string() || id.is_number_integer()) return id;
    return std::nullopt;
  }

  void Space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\t' || text_[at_] == '\n' || text_[at_] == '\r')) ++at_;
  }
  bool Take(char c) {
    if (at_ >= text_.size() || text_[at_] != c) return false;
    ++at_;
    return true;
  }
  bool SkipString() {
    if (!Take('"')) return false;
    while (at_ < text_.size()) {
      const char c = text_[at_++];
      if (c == '\\') {
        ++at_;
      } else if (c == '"') {
        return at_ <= text_.size();
      }
    }
    return false;
  }
  // One value: a string, an object or an array (to its matching bracket), or a bare token
  // (a number, true, false, null) up to the next ',', '}' or ']' or space.
  bool SkipValue() {
    if (at_ >= text_.size()) return false;
    if (text_[at_] == '"') return SkipString();
    if (text_[at_] == '{' || text_[at_] == '[') {
      size_t depth = 0;
      while (at_ < text_.size()) {
        const char c = text_[at_];
        if (c == '"') {
          if (!SkipString()) return false;
          continue;
        }
        ++at_;
        if (c == '{' || c == '[') ++depth;
        if ((c == '}' || c == ']') && --depth == 0) return true;
      }
      return false;
    }
    const size_t start = at_;
    while (at_ < text_.size() && std::string_view(",}] \t\r\n").find(text_[at_]) == std::string_view::npos) ++at_;
    return at_ > start;
  }

  std::string_view text_;
  size_t at_ = 0;
};

ReadLine Refuse(const Json& id, int code, const std::string& why) { return ReadLine{std::nullopt, ErrorReply(id, code, why)}; }

bool IsValidId(const Json& id) { return id.is_string() || id.is_number_integer(); }

}  // namespace

ReadLine ParseLine(std::string_view line) {
  Result<Json> parsed = ParseJson(line, "message");
  if (!parsed.ok()) {
    // Answered to the request's id when a tolerant read finds it, so that the client's call
    // gets its error rather than waiting for its timeout.
    const Json id = IdScanner(line).Find().value_or(Json(nullptr));
    return Refuse(id, kParseError, "Parse error: " + Excerpt(parsed.status().message()));
  }
  const Json& message = *parsed;
  if (message.is_array()) return Refuse(nullptr, kInvalidRequest, "Invalid Request: batches are not supported; send one message per line");
  if (!message.is_object()) return Refuse(nullptr, kInvalidRequest, "Invalid Request: a message must be a JSON object");
  auto id = message.find("id");
  const bool has_id = id != message.end();
  const Json reply_id = has_id && IsValidId(*id) ? *id : Json(nullptr);
  auto version = message.find("jsonrpc");
  if (version == message.end() || *version != "2.0") {
    return Refuse(reply_id, kInvalidRequest, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
  }
  if (has_id && !IsValidId(*id)) {
    return Refuse(nullptr, kInvalidRequest, "Invalid Request: \"id\" must be a string or an integer (not null)");
  }
  auto method = message.find("method");
  if (method == message.end()) {
    if (has_id && (message.contains("result") || message.contains("error"))) {
      Incoming response;
      response.kind = Incoming::Kind::kResponse;
      response.id = *id;
      return ReadLine{response, std::nullopt};
    }
    return Refuse(reply_id, kInvalidRequest, "Invalid Request: no \"method\"");
  }
  if (!method->is_string()) return Refuse(reply_id, kInvalidRequest, "Invalid Request: \"method\" must be a string");
  Incoming incoming;
  incoming.kind = has_id ? Incoming::Kind::kRequest : Incoming::Kind::kNotification;
  if (has_id) incoming.id = *id;
  incoming.method = method->get<std::string>();
  auto params = message.find("params");
  incoming.params = params == message.end() ? Json(nullptr) : *params;
  return ReadLine{incoming, std::nullopt};
}

Json ResultReply(const Json& id, Json result) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"result", std::move(result)}};
}

Json ErrorReply(const Json& id, int code, const std::string& message) {
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", BoundedMessage(message)}}}};
}

std::string Serialize(const Json& message) { return message.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace capsule::mcp
