// OpenAI Chat Completions (POST /v1/chat/completions).
//
// The system instructions are the first message (role "system"). An assistant step is one
// assistant message: its texts joined by a blank line as `content` (null when it only calls),
// its calls as `tool_calls` [{id, type: "function", function: {name, arguments}}] where
// `arguments` is the JSON object as a string. Each call is answered, right after, by one
// message {role: "tool", tool_call_id, content}; Chat Completions has no error flag, so an
// error result's content starts with "Error: ". Reasoning is never sent (render.h, rule 1).
#include "journal/render/providers.h"

namespace capsule::journal::render {

namespace {

// Content parts for attachments: images as data URLs, a PDF as a file part, text as text.
void AddParts(const std::vector<AttachmentPart>& attachments, Json* parts) {
  for (const AttachmentPart& part : attachments) {
    if (part.media_type == "text/plain") {
      parts->push_back({{"type", "text"}, {"text", part.text}});
    } else if (part.media_type == "application/pdf") {
      parts->push_back({{"type", "file"},
                        {"file", {{"filename", part.name.empty() ? part.sha256 + ".pdf" : part.name},
                                  {"file_data", "data:application/pdf;base64," + part.base64}}}});
    } else {
      parts->push_back({{"type", "image_url"}, {"image_url", {{"url", "data:" + part.media_type + ";base64," + part.base64}}}});
    }
  }
}

}  // namespace

Json RenderOpenAI(const Conversation& conversation, const Window& window, const RenderTarget& target) {
  Json messages = Json::array();
  if (!conversation.system.empty()) messages.push_back({{"role", "system"}, {"content", conversation.system}});
  for (const Turn& turn : Turns(conversation, window)) {
    switch (turn.kind) {
      case Turn::Kind::kUser: {
        const std::vector<AttachmentPart>* attachments = turn.units.empty() ? nullptr : &turn.units[0]->attachments;
        if (attachments == nullptr || attachments->empty()) {
          messages.push_back({{"role", "user"}, {"content", turn.text}});
          break;
        }
        // Content parts: the text, then each attachment inline (images as data URLs, a PDF
        // as a file part, text as text).
        Json parts = Json::array();
        if (turn.text.find_first_not_of(" \t\r\n") != std::string::npos) parts.push_back({{"type", "text"}, {"text", turn.text}});
        AddParts(*attachments, &parts);
        messages.push_back({{"role", "user"}, {"content", std::move(parts)}});
        break;
      }
      case Turn::Kind::kAssistant: {
        std::string text;
        Json calls = Json::array();
        for (const Unit* unit : turn.units) {
          if (unit->call) {
            calls.push_back({{"id", unit->call->id},
                             {"type", "function"},
                             {"function", {{"name", unit->call->name}, {"arguments", unit->call->arguments.dump()}}}});
          } else {
            text += (text.empty() ? "" : "\n\n") + unit->text;
          }
        }
        Json message = {{"role", "assistant"}, {"content", text.empty() ? Json(nullptr) : Json(text)}};
        if (!calls.empty()) message["tool_calls"] = std::move(calls);
        messages.push_back(std::move(message));
        break;
      }
      case Turn::Kind::kResults:
        for (const Unit* unit : turn.units) {
          std::string content = ContentText(unit->call->result);
          if (unit->call->is_error) content = "Error: " + content;
          messages.push_back({{"role", "tool"}, {"tool_call_id", unit->call->id}, {"content", content}});
        }
        // A tool message holds text only: the results' attachments follow in a user message.
        for (const Unit* unit : turn.units) {
          if (unit->call->result_attachments.empty()) continue;
          Json parts = Json::array({{{"type", "text"}, {"text", "Attachments of the result of call " + unit->call->id + ":"}}});
          AddParts(unit->call->result_attachments, &parts);
          messages.push_back({{"role", "user"}, {"content", std::move(parts)}});
        }
        break;
    }
  }
  Json body = {{"model", target.model}, {"messages", std::move(messages)}};
  if (!conversation.tools.empty()) {
    Json tools = Json::array();
    for (const ToolDeclaration& tool : conversation.tools) {
      tools.push_back({{"type", "function"},
                       {"function", {{"name", tool.name}, {"description", tool.description}, {"parameters", tool.parameters}}}});
    }
    body["tools"] = std::move(tools);
  }
  return body;
}

}  // namespace capsule::journal::render
