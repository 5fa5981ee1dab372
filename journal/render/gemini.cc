// Gemini generateContent (POST /v1beta/models/{model}:generateContent; the model is in the
// URL, not the body).
//
// The system instructions go in `systemInstruction: {parts: [{text}]}`. `contents` alternate
// roles "user" and "model", the user's first; consecutive turns of the same role are merged,
// with one exception: Gemini refuses a user content that mixes functionResponse parts with
// text, so a user's text right after the results is a user content of its own (the only
// place two user contents follow each other). A request never ends with a model turn, which
// Gemini refuses: the window's trail (kContinueText) follows an assistant's last text.
// An assistant step is one model content: per unit, its kept reasoning's text as a thought
// part {text, thought: true}, then its text or {functionCall: {name, args}}. Gemini puts a
// thought signature on the part that follows the thinking, so the signature of a unit's last
// reasoning goes on its text or functionCall part as `thoughtSignature` (an earlier one stays
// on its own thought part). A reasoning with no text (a signature alone) is no part at all,
// since Gemini refuses an empty one: its signature goes on the next part of the model content,
// the next thought part or else the unit's text or functionCall part. A part carries one
// signature, so a carried one is dropped when the next part has its own (a thought part that
// is not the unit's last) or another signature alone follows it; a signature with no output
// after it in its step is not kept at all (render.h, rule 1). The results follow in the next
// user content as {functionResponse: {name, response}} parts, same order and count as the
// calls, where response is {"output": content} or, for an error, {"error": content}. No ids
// are sent: Gemini pairs responses with calls by order.
//
// Gemini 3 and later refuse a step's first functionCall without a thought signature; a call
// made by another model has none, so for those models it carries Google's documented
// placeholder, kSkipSignatureValidator. Tools are declared as
// {functionDeclarations: [{name, description, parametersJsonSchema}]}, which takes the
// journal's JSON Schema as it is (`parameters` takes only an OpenAPI subset).
#include <cctype>

#include "capsule/format/attachments.h"
#include "journal/render/providers.h"

namespace capsule::journal::render {

namespace {

constexpr char kSkipSignatureValidator[] = "skip_thought_signature_validator";

// "gemini-3-pro", "models/gemini-3.5-flash", ... : the models that check signatures.
bool ChecksThoughtSignatures(std::string model) {
  if (model.rfind("models/", 0) == 0) model = model.substr(7);
  if (model.rfind("gemini-", 0) != 0) return false;
  size_t at = 7, end = at;
  while (end < model.size() && std::isdigit(static_cast<unsigned char>(model[end]))) ++end;
  return end > at && end - at < 6 && std::stoi(model.substr(at, end - at)) >= 3;
}

class ContentList {
 public:
  // Merges `part` into the last content when the role is the same, except that function
  // responses and other parts never share a content.
  void Add(const char* role, Json part) {
    const bool response = part.contains("functionResponse");
    if (contents_.empty() || contents_.back()["role"] != role ||
        contents_.back()["parts"].back().contains("functionResponse") != response) {
      contents_.push_back({{"role", role}, {"parts", Json::array()}});
    }
    contents_.back()["parts"].push_back(std::move(part));
  }
  Json& contents() { return contents_; }

 private:
  Json contents_ = Json::array();
};

// An attachment inline: inlineData with its media type and base64 bytes.
Json InlineData(const AttachmentPart& part) {
  return {{"inlineData", {{"mimeType", part.media_type}, {"data", part.media_type == "text/plain" ? Base64(part.text) : part.base64}}}};
}

}  // namespace

Json RenderGemini(const Conversation& conversation, const Window& window, const RenderTarget& target) {
  ContentList list;
  for (const Turn& turn : Turns(conversation, window)) {
    switch (turn.kind) {
      case Turn::Kind::kUser: {
        const std::vector<AttachmentPart>* attachments = turn.units.empty() ? nullptr : &turn.units[0]->attachments;
        bool has_text = turn.text.find_first_not_of(" \t\r\n") != std::string::npos;
        if (has_text || attachments == nullptr || attachments->empty()) list.Add("user", {{"text", turn.text}});
        if (attachments == nullptr) break;
        // Each attachment inline: inlineData with its media type and base64 bytes.
        for (const AttachmentPart& part : *attachments) list.Add("user", InlineData(part));
        break;
      }
      case Turn::Kind::kAssistant:
        for (const Unit* unit : turn.units) {
          std::string carried;  // a signature for the next part (see the top of this file)
          for (size_t r = 0; r < unit->reasoning.size(); ++r) {
            const KeptReasoning& reasoning = unit->reasoning[r];
            const bool last = r + 1 == unit->reasoning.size();
            if (reasoning.text.empty()) {
              carried = reasoning.signature;  // an earlier one carried here has no part left
              continue;
            }
            Json thought = {{"text", reasoning.text}, {"thought", true}};
            const std::string& signature = last ? carried : reasoning.signature;
            if (!signature.empty()) thought["thoughtSignature"] = signature;
            carried = last ? reasoning.signature : std::string();
            list.Add("model", std::move(thought));
          }
          Json part = unit->call ? Json{{"functionCall", {{"name", unit->call->name}, {"args", unit->call->arguments}}}}
                                 : Json{{"text", unit->text}};
          if (!carried.empty()) part["thoughtSignature"] = carried;
          list.Add("model", std::move(part));
        }
        break;
      case Turn::Kind::kResults:
        for (const Unit* unit : turn.units) {
          const char* key = unit->call->is_error ? "error" : "output";
          list.Add("user", {{"functionResponse", {{"name", unit->call->name}, {"response", {{key, unit->call->result}}}}}});
        }
        // The results' attachments follow their responses, inline.
        for (const Unit* unit : turn.units) {
          for (const AttachmentPart& part : unit->call->result_attachments) list.Add("user", InlineData(part));
        }
        break;
    }
  }
  if (!window.trail.empty()) list.Add("user", {{"text", window.trail}});
  Json& contents = list.contents();
  if (ChecksThoughtSignatures(target.model)) {
    for (Json& content : contents) {
      if (content["role"] != "model") continue;
      for (Json& part : content["parts"]) {
        if (!part.contains("functionCall")) continue;
        if (!part.contains("thoughtSignature")) part["thoughtSignature"] = kSkipSignatureValidator;
        break;  // only the first call of a step carries one
      }
    }
  }
  Json body = {{"contents", std::move(contents)}};
  if (!conversation.system.empty()) body["systemInstruction"] = {{"parts", {{{"text", conversation.system}}}}};
  if (!conversation.tools.empty()) {
    Json declarations = Json::array();
    for (const ToolDeclaration& tool : conversation.tools) {
      declarations.push_back({{"name", tool.name}, {"description", tool.description}, {"parametersJsonSchema", tool.parameters}});
    }
    body["tools"] = Json::array({{{"functionDeclarations", std::move(declarations)}}});
  }
  return body;
}

}  // namespace capsule::journal::render
