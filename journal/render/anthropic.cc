// Anthropic Messages (POST /v1/messages).
//
// The system instructions go in the top-level `system`. Messages alternate user/assistant and
// the first is the user's (the window's lead guarantees it): consecutive Turns (providers.h) of
// the same role are merged into one message. An assistant step's blocks are its kept
// reasoning ({type: thinking, thinking, signature} or {type: redacted_thinking, data} from
// `encrypted`) and its texts and {type: tool_use, id, name, input} blocks, except that every
// thinking block of a message comes first, in journal order: the API refuses a thinking block
// after other content, so a step recorded as reasoning, text, reasoning, call opens with both
// thinking blocks, and so does a message merged from two steps (a model switch between them).
// The thinking of a conversation turn (a user message and all the assistant did up to the
// next, render.h rule 1) is sent whole or not at all: one whose own reasoning was not all
// kept has none here already (BuildConversation), and one the window cuts is sent without it.
// The results follow in the very next user message as {type: tool_result, tool_use_id,
// content, is_error?} blocks, before any text of that message. A request that ends with an
// assistant message (a prefill) has the trailing white space of its last text cut, which the
// API refuses. max_tokens is required: RenderTarget::max_tokens (kDefaultAnthropicMaxTokens
// unless given). The `thinking` setting of a request is the caller's choice and is not written.
#include <optional>

#include "journal/render/providers.h"

namespace capsule::journal::render {

namespace {

bool IsThinking(const Json& block) { return block["type"] == "thinking" || block["type"] == "redacted_thinking"; }

class MessageList {
 public:
  // Appends `block` to the last message if it has `role`, else to a new one. A thinking block
  // goes after the message's thinking blocks but before anything else, since the API refuses
  // thinking after text or tool_use; thinking blocks keep their order among themselves.
  void Add(const char* role, Json block) {
    if (messages_.empty() || messages_.back()["role"] != role) {
      messages_.push_back({{"role", role}, {"content", Json::array()}});
    }
    Json& content = messages_.back()["content"];
    if (!IsThinking(block)) {
      content.push_back(std::move(block));
      return;
    }
    size_t at = 0;
    while (at < content.size() && IsThinking(content[at])) ++at;
    content.insert(content.begin() + static_cast<std::ptrdiff_t>(at), std::move(block));
  }
  Json Take() { return std::move(messages_); }
  Json& messages() { return messages_; }

 private:
  Json messages_ = Json::array();
};

// The turn the window cuts: one with assistant output on both sides of window.first. It is
// sent without thinking (render.h, rule 1).
std::optional<uint64_t> CutTurn(const Conversation& conversation, const Window& window) {
  const std::vector<Unit>& units = conversation.units;
  if (window.first == 0 || window.first >= units.size()) return std::nullopt;
  const uint64_t turn = units[window.first].turn;
  for (size_t i = window.first; i-- > 0 && units[i].turn == turn;) {
    if (!units[i].from_user) return turn;
  }
  return std::nullopt;
}

// An attachment inline: an image block, or a document block (base64 PDF, or text).
Json AttachmentBlock(const AttachmentPart& part) {
  if (part.media_type == "text/plain") {
    return {{"type", "document"}, {"source", {{"type", "text"}, {"media_type", "text/plain"}, {"data", part.text}}}};
  }
  return {{"type", part.media_type == "application/pdf" ? "document" : "image"},
          {"source", {{"type", "base64"}, {"media_type", part.media_type}, {"data", part.base64}}}};
}

}  // namespace

Json RenderAnthropic(const Conversation& conversation, const Window& window, const RenderTarget& target) {
  const std::optional<uint64_t> cut = CutTurn(conversation, window);
  MessageList list;
  for (const Turn& turn : Turns(conversation, window)) {
    switch (turn.kind) {
      case Turn::Kind::kUser: {
        const std::vector<AttachmentPart>* attachments = turn.units.empty() ? nullptr : &turn.units[0]->attachments;
        bool has_text = turn.text.find_first_not_of(" \t\r\n") != std::string::npos;
        if (has_text || attachments == nullptr || attachments->empty()) list.Add("user", {{"type", "text"}, {"text", turn.text}});
        if (attachments == nullptr) break;
        // Each attachment inline: an image block, or a document block (base64 PDF, or text).
        for (const AttachmentPart& part : *attachments) list.Add("user", AttachmentBlock(part));
        break;
      }
      case Turn::Kind::kAssistant:
        for (const Unit* unit : turn.units) {
          static const std::vector<KeptReasoning> kNone;
          for (const KeptReasoning& r : unit->turn == cut ? kNone : unit->reasoning) {
            if (!r.signature.empty()) {
              list.Add("assistant", {{"type", "thinking"}, {"thinking", r.text}, {"signature", r.signature}});
            } else {
              list.Add("assistant", {{"type", "redacted_thinking"}, {"data", r.encrypted}});
            }
          }
          if (unit->call) {
            list.Add("assistant", {{"type", "tool_use"},
                                   {"id", unit->call->id},
                                   {"name", unit->call->name},
                                   {"input", unit->call->arguments}});
          } else {
            list.Add("assistant", {{"type", "text"}, {"text", unit->text}});
          }
        }
        break;
      case Turn::Kind::kResults:
        for (const Unit* unit : turn.units) {
          Json block = {{"type", "tool_result"},
                        {"tool_use_id", unit->call->id},
                        {"content", ContentText(unit->call->result)}};
          if (!unit->call->result_attachments.empty()) {
            // A result's content as blocks: its text, then each attachment.
            Json content = Json::array({{{"type", "text"}, {"text", ContentText(unit->call->result)}}});
            for (const AttachmentPart& part : unit->call->result_attachments) content.push_back(AttachmentBlock(part));
            block["content"] = std::move(content);
          }
          if (unit->call->is_error) block["is_error"] = true;
          list.Add("user", std::move(block));
        }
        break;
    }
  }
  Json& messages = list.messages();
  if (!messages.empty() && messages.back()["role"] == "assistant") {
    Json& last = messages.back()["content"].back();
    if (last["type"] == "text") {
      std::string text = last["text"].get<std::string>();
      text.erase(text.find_last_not_of(" \t\r\n") + 1);  // never empty: blank texts are not sent
      last["text"] = text;
    }
  }
  Json body = {{"model", target.model}, {"max_tokens", target.max_tokens}, {"messages", list.Take()}};
  if (!conversation.system.empty()) body["system"] = conversation.system;
  if (!conversation.tools.empty()) {
    Json tools = Json::array();
    for (const ToolDeclaration& tool : conversation.tools) {
      tools.push_back({{"name", tool.name}, {"description", tool.description}, {"input_schema", tool.parameters}});
    }
    body["tools"] = std::move(tools);
  }
  return body;
}

}  // namespace capsule::journal::render
