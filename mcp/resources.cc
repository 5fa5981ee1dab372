#include "mcp/resources.h"

#include <algorithm>
#include <cctype>

#include "capsule/base/file_io.h"
#include "journal/owned/ports_json.h"
#include "mcp/json_rpc.h"

namespace capsule::mcp {

namespace {

constexpr char kNotes[] = "notes";
constexpr char kConversations[] = "conversations/";

std::string Base(const ResourceSource& source) { return "capsule://" + source.agent + "/"; }

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Json ConversationEntry(const ResourceSource& source, const owned::ConversationSummary& conversation) {
  return {{"uri", Base(source) + kConversations + PercentEncode(conversation.id)},
          {"name", "conversation " + conversation.id},
          {"title", "Conversation " + conversation.id},
          {"description", std::to_string(conversation.messages) + (conversation.messages == 1 ? " message, " : " messages, ") +
                              conversation.started_at + " to " + conversation.last_at},
          {"mimeType", "application/json"}};
}

}  // namespace

std::string PercentEncode(const std::string& text) {
  static const char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::optional<std::string> PercentDecode(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) return std::nullopt;
    int high = HexValue(text[i + 1]), low = HexValue(text[i + 2]);
    if (high < 0 || low < 0) return std::nullopt;
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return out;
}

Result<Json> ListResources(const ResourceSource& source, const std::string& cursor) {
  size_t offset = 0;
  if (!cursor.empty()) {
    if (cursor.size() > 12 || cursor.find_first_not_of("0123456789") != std::string::npos) {
      return Status::InvalidArgument("cursor " + cursor, "not one this server gave");
    }
    for (char c : cursor) offset = offset * 10 + static_cast<size_t>(c - '0');
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::ConversationSummary> conversations, source.ports->Conversations());
  Json resources = Json::array();
  if (offset == 0 && PathExists(source.notes_path)) {
    resources.push_back({{"uri", Base(source) + kNotes},
                         {"name", "notes"},
                         {"title", "The agent's notes"},
                         {"description", "memory/working_memory.md: the agent's own notes"},
                         {"mimeType", "text/markdown"}});
  }
  size_t end = std::min(conversations.size(), offset + kResourcesPerPage);
  for (size_t i = offset; i < end; ++i) resources.push_back(ConversationEntry(source, conversations[i]));
  Json out = {{"resources", std::move(resources)}};
  if (end < conversations.size()) out["nextCursor"] = std::to_string(end);
  return out;
}

Json ResourceTemplates(const ResourceSource& source) {
  return {{"resourceTemplates",
           Json::array({{{"uriTemplate", Base(source) + kConversations + "{conversation}"},
                         {"name", "conversation"},
                         {"title", "A conversation's history"},
                         {"description", "One conversation's messages, oldest first, as JSON"},
                         {"mimeType", "application/json"}}})}};
}

Result<Json> ReadResource(const ResourceSource& source, const std::string& uri) {
  const std::string base = Base(source);
  if (uri.compare(0, base.size(), base) != 0) {
    return Status::NotFound("resource " + uri, "this server's URIs begin with " + base);
  }
  const std::string rest = uri.substr(base.size());
  if (rest == kNotes) {
    if (!PathExists(source.notes_path)) return Status::NotFound("resource " + uri, "the capsule has no notes file");
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(source.notes_path));
    return Json{{"contents", Json::array({{{"uri", uri}, {"mimeType", "text/markdown"}, {"text", text}}})}};
  }
  if (rest.compare(0, std::string(kConversations).size(), kConversations) == 0) {
    std::optional<std::string> id = PercentDecode(rest.substr(std::string(kConversations).size()));
    if (!id || id->empty()) return Status::NotFound("resource " + uri, "not a conversation's URI");
    CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::Message> messages, source.ports->Load(*id));
    if (messages.empty()) return Status::NotFound("resource " + uri, "no conversation " + *id);
    Json list = Json::array();
    for (const owned::Message& message : messages) list.push_back(owned::MessageToJson(message));
    const std::string text = Serialize({{"conversation", *id}, {"messages", std::move(list)}});
    return Json{{"contents", Json::array({{{"uri", uri}, {"mimeType", "application/json"}, {"text", text}}})}};
  }
  return Status::NotFound("resource " + uri, "names nothing here (notes, conversations/ID)");
}

}  // namespace capsule::mcp
