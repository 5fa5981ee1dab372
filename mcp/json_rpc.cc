#include "mcp/json_rpc.h"

#include "mcp/reply_bounds.h"

namespace capsule::mcp {

namespace {

ReadLine Refuse(const Json& id, int code, const std::string& why) { return ReadLine{std::nullopt, ErrorReply(id, code, why)}; }

bool IsValidId(const Json& id) { return id.is_string() || id.is_number_integer(); }

}  // namespace

ReadLine ParseLine(std::string_view line) {
  Result<Json> parsed = ParseJson(line, "message");
  if (!parsed.ok()) return Refuse(nullptr, kParseError, "Parse error: " + Excerpt(parsed.status().message()));
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
  return {{"jsonrpc", "2.0"}, {"id", id}, {"error", {{"code", code}, {"message", message}}}};
}

std::string Serialize(const Json& message) { return message.dump(-1, ' ', false, Json::error_handler_t::replace); }

}  // namespace capsule::mcp
