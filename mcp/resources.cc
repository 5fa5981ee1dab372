#include "mcp/resources.h"

#include <algorithm>
#include <cctype>

#include "capsule/base/file_io.h"
#include "mcp/harness_resources.h"
#include "mcp/history_page.h"
#include "mcp/json_rpc.h"
#include "mcp/reply_bounds.h"

namespace capsule::mcp {

namespace {

constexpr char kNotes[] = "notes";
constexpr char kConversations[] = "conversations/";
constexpr char kMessages[] = "messages/";
constexpr char kSkills[] = "skills/";

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

bool StartsWith(const std::string& text, const std::string& prefix) { return text.compare(0, prefix.size(), prefix) == 0; }

// A query's one parameter `name`, a whole number of at most 12 digits: "name=123".
std::optional<int64_t> QueryNumber(const std::string& query, const std::string& name) {
  if (!StartsWith(query, name + "=")) return std::nullopt;
  const std::string digits = query.substr(name.size() + 1);
  if (digits.empty() || digits.size() > 12 || digits.find_first_not_of("0123456789") != std::string::npos) {
    return std::nullopt;
  }
  return std::stoll(digits);
}

Status NotHere(const std::string& uri, const std::string& why) {
  return Status::NotFound("resource " + Excerpt(uri), why);
}

Json TextContents(const std::string& uri, const char* mime, std::string text) {
  return {{"contents", Json::array({{{"uri", uri}, {"mimeType", mime}, {"text", std::move(text)}}})}};
}

// capsule://AGENT/conversations/ID[?before_seq=N]: a page of history, as history_load gives it
// with its largest limit, and the URI of the page before.
Result<Json> ReadConversation(const ResourceSource& source, const std::string& uri, const std::string& rest) {
  const size_t mark = rest.find('?');
  std::optional<std::string> id = PercentDecode(rest.substr(0, mark));
  if (!id || id->empty()) return NotHere(uri, "not a conversation's URI");
  std::optional<int64_t> before;
  if (mark != std::string::npos) {
    before = QueryNumber(rest.substr(mark + 1), "before_seq");
    if (!before || *before < 1) return NotHere(uri, "its query is not before_seq=N (N at least 1)");
  }
  CAPSULE_ASSIGN_OR_RETURN(Json page, HistoryPage(*source.ports, source.agent, *id, kMaxPageMessages, before));
  if (page["messages"].empty() && !before) return NotHere(uri, "no conversation " + Excerpt(*id));
  const std::string base = Base(source) + kConversations + PercentEncode(*id);
  page["next"] = page["next_before_seq"].is_null()
                     ? Json(nullptr)
                     : Json(base + "?before_seq=" + std::to_string(page["next_before_seq"].get<int64_t>()));
  return TextContents(uri, "application/json", Serialize(page));
}

}  // namespace

Result<Json> TextPart(const std::string& uri, const char* mime, const std::string& text, const std::string& query) {
  int64_t part = 0;
  if (!query.empty()) {
    std::optional<int64_t> asked = QueryNumber(query, "part");
    if (!asked) return NotHere(uri, "its query is not part=K");
    part = *asked;
  }
  const std::vector<size_t> starts = PartStarts(text, kPartBytes);
  if (part >= static_cast<int64_t>(starts.size())) {
    return NotHere(uri, "the text has " + std::to_string(starts.size()) + (starts.size() == 1 ? " part" : " parts") +
                            ", 0 to " + std::to_string(starts.size() - 1));
  }
  const size_t k = static_cast<size_t>(part);
  const size_t begin = starts[k], end = k + 1 < starts.size() ? starts[k + 1] : text.size();
  Json out = TextContents(uri, mime, text.substr(begin, end - begin));
  out["contents"][0]["_meta"] = {
      {"capsule/part", part}, {"capsule/parts", starts.size()}, {"capsule/offset", begin}, {"capsule/bytes", text.size()}};
  return out;
}

namespace {

// The path and the query of what follows the base of a URI.
std::pair<std::string, std::string> SplitQuery(const std::string& rest) {
  const size_t mark = rest.find('?');
  if (mark == std::string::npos) return {rest, ""};
  return {rest.substr(0, mark), rest.substr(mark + 1)};
}

// capsule://AGENT/messages/ID[?part=K]: part K of a message's content, as text.
Result<Json> ReadMessagePart(const ResourceSource& source, const std::string& uri, const std::string& rest) {
  auto [path, query] = SplitQuery(rest);
  std::optional<std::string> id = PercentDecode(path);
  if (!id || id->empty()) return NotHere(uri, "not a message's URI");
  CAPSULE_ASSIGN_OR_RETURN(owned::SourceEvent event, source.ports->Source(*id));
  if (!event.message) return NotHere(uri, "no message " + Excerpt(*id));
  return TextPart(uri, "text/plain", event.message->content, query);
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
      return Status::InvalidArgument("cursor " + Excerpt(cursor), "not one this server gave");
    }
    for (char c : cursor) offset = offset * 10 + static_cast<size_t>(c - '0');
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::ConversationSummary> conversations, source.ports->Conversations());
  Json resources = Json::array();
  if (offset == 0) ListHarness(source.served_root, Base(source), resources);
  if (offset == 0 && PathExists(source.notes_path)) {
    resources.push_back({{"uri", Base(source) + kNotes},
                         {"name", "notes"},
                         {"title", "The agent's notes"},
                         {"description", "memory/working_memory.md: the agent's own notes"},
                         {"mimeType", "text/markdown"}});
  }
  size_t end = offset, used = 0;
  for (; end < conversations.size() && end < offset + kResourcesPerPage; ++end) {
    Json entry = ConversationEntry(source, conversations[end]);
    const size_t cost = Serialize(entry).size() + 1;
    if (end > offset && used + cost > kPageBytes) break;
    used += cost;
    resources.push_back(std::move(entry));
  }
  Json out = {{"resources", std::move(resources)}};
  if (end < conversations.size()) out["nextCursor"] = std::to_string(end);
  return out;
}

Json ResourceTemplates(const ResourceSource& source) {
  return {{"resourceTemplates",
           Json::array({{{"uriTemplate", Base(source) + kConversations + "{conversation}"},
                         {"name", "conversation"},
                         {"title", "A conversation's history"},
                         {"description",
                          "One conversation's latest messages, oldest first, as JSON, one page (512 KiB at most); "
                          "its \"next\" is the URI of the page before"},
                         {"mimeType", "application/json"}},
                        {{"uriTemplate", Base(source) + kMessages + "{message}"},
                         {"name", "message"},
                         {"title", "A message's whole content"},
                         {"description",
                          "The content of the message whose id is given, as text, in parts of 512 KiB at most: "
                          "?part=K reads part K (_meta capsule/parts says how many)"},
                         {"mimeType", "text/plain"}},
                        {{"uriTemplate", Base(source) + kSkills + "{skill}/{file}"},
                         {"name", "skill file"},
                         {"title", "A file of a skill"},
                         {"description", "A file a skill keeps beside its SKILL.md, as UTF-8 text"},
                         {"mimeType", "text/plain"}}})}};
}

Result<Json> ReadResource(const ResourceSource& source, const std::string& uri) {
  const std::string base = Base(source);
  if (!StartsWith(uri, base)) return NotHere(uri, "this server's URIs begin with " + base);
  const std::string rest = uri.substr(base.size());
  if (auto [path, query] = SplitQuery(rest); path == kNotes) {
    if (!PathExists(source.notes_path)) return NotHere(uri, "the capsule has no notes file");
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(source.notes_path));
    return TextPart(uri, "text/markdown", text, query);
  }
  if (auto [path, query] = SplitQuery(rest); auto harness = ReadHarness(source.served_root, uri, path, query)) {
    return std::move(*harness);
  }
  if (StartsWith(rest, kConversations)) return ReadConversation(source, uri, rest.substr(std::string(kConversations).size()));
  if (StartsWith(rest, kMessages)) return ReadMessagePart(source, uri, rest.substr(std::string(kMessages).size()));
  return NotHere(uri, "names nothing here (instructions, skills/NAME, notes, conversations/ID, messages/ID)");
}

}  // namespace capsule::mcp
