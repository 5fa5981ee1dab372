#include "mcp/history_page.h"

#include <algorithm>
#include <deque>

#include "journal/owned/ports_json.h"
#include "mcp/json_rpc.h"
#include "mcp/reply_bounds.h"
#include "mcp/resources.h"

namespace capsule::mcp {

namespace {

// Messages read from the database at a time while a page fills: few, since each may be as
// large as an event (16 MiB).
constexpr int64_t kLoadBatch = 8;

}  // namespace

std::string MessageUri(const std::string& agent, const std::string& message_id) {
  return "capsule://" + agent + "/messages/" + PercentEncode(message_id);
}

Json BoundedMessageJson(const owned::Message& message, const std::string& agent) {
  Json out = owned::MessageToJson(message);
  if (JsonTextBytes(message.content) <= kInlineContentBytes) return out;
  out["content"] = message.content.substr(0, PrefixEnd(message.content, 0, kInlineContentBytes));
  out["content_cut"] = {{"bytes", message.content.size()},
                        {"parts", PartStarts(message.content, kPartBytes).size()},
                        {"uri", MessageUri(agent, message.id)}};
  return out;
}

Result<Json> HistoryPage(owned::CapsulePorts& ports, const std::string& agent, const std::string& conversation,
                         int64_t limit, std::optional<int64_t> before_seq) {
  std::deque<Json> page;
  int64_t first_seq = 0;
  size_t used = 0;
  bool full = false;
  std::optional<int64_t> below = before_seq;
  while (!full && static_cast<int64_t>(page.size()) < limit) {
    const int64_t asked = std::min(kLoadBatch, limit - static_cast<int64_t>(page.size()));
    CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::Message> batch, ports.LoadPage(conversation, asked, below));
    for (auto it = batch.rbegin(); it != batch.rend(); ++it) {
      Json message = BoundedMessageJson(*it, agent);
      // What the message takes in a reply: its JSON, as the text of a result.
      const size_t cost = JsonTextBytes(Serialize(message)) + 1;
      if (!page.empty() && used + cost > kPageBytes) {
        full = true;
        break;
      }
      used += cost;
      first_seq = it->seq;
      below = it->seq;
      page.push_front(std::move(message));
    }
    if (static_cast<int64_t>(batch.size()) < asked) break;  // the first message is in
  }
  Json messages = Json::array();
  for (Json& message : page) messages.push_back(std::move(message));
  // Seqs run 1, 2, 3 ... within a conversation: a page that starts above 1 has older ones.
  Json next = !messages.empty() && first_seq > 1 ? Json(first_seq) : Json(nullptr);
  return Json{{"conversation", conversation}, {"messages", std::move(messages)}, {"next_before_seq", next}};
}

}  // namespace capsule::mcp
