#include "journal/render/conversation.h"

#include <deque>
#include <map>
#include <set>

#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"

namespace capsule::journal::render {

namespace {

constexpr size_t kMaxIdLength = 40;     // OpenAI's limit on a tool call id
constexpr size_t kMaxNameLength = 64;   // all three providers' limit on a function name

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}
bool IsLetterOrUnderscore(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

// Anthropic refuses a text block with nothing but white space; no provider needs one.
bool IsBlank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

// The attachments `event` names whose bytes the target holds, in the event's order.
std::vector<AttachmentPart> Attachments(const Event& event, const RenderTarget& target) {
  std::vector<AttachmentPart> parts;
  auto list = event.data.find("attachments");
  if (list == event.data.end() || !list->is_array()) return parts;
  for (const Json& item : *list) {
    if (!item.is_object()) continue;
    AttachmentPart part;
    part.sha256 = item.value("sha256", "");
    part.media_type = item.value("media_type", "");
    part.name = item.value("name", "");
    auto bytes = target.attachments.find(part.sha256);
    if (bytes == target.attachments.end()) continue;
    if (part.media_type == "text/plain") {
      part.text = bytes->second;
    } else {
      part.base64 = Base64(bytes->second);
    }
    parts.push_back(std::move(part));
  }
  return parts;
}

std::string StringField(const Event& event, const char* key) {
  auto it = event.data.find(key);
  return it != event.data.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Maps journal call ids to provider-safe, distinct ids (see conversation.h).
class IdMapper {
 public:
  std::string Map(const std::string& call_id) {
    bool fits = !call_id.empty() && call_id.size() <= kMaxIdLength;
    for (char c : call_id) fits = fits && IsIdChar(c);
    std::string base = fits ? call_id : "call_" + Sha256Hex(call_id).substr(0, 24);
    std::string id = base;
    for (int n = 2; used_.count(id) > 0; ++n) {
      std::string suffix = "_" + std::to_string(n);
      id = base.substr(0, std::min(base.size(), kMaxIdLength - suffix.size())) + suffix;
    }
    used_.insert(id);
    return id;
  }

 private:
  std::set<std::string> used_;
};

std::string SafeToolName(const std::string& name) {
  bool fits = !name.empty() && name.size() <= kMaxNameLength && IsLetterOrUnderscore(name[0]);
  for (char c : name) fits = fits && IsIdChar(c);
  if (fits) return name;
  std::string safe;
  for (char c : name) safe += IsIdChar(c) ? c : '_';
  if (safe.empty() || !IsLetterOrUnderscore(safe[0])) safe = "_" + safe;
  std::string suffix = "_" + Sha256Hex(name).substr(0, 8);
  return safe.substr(0, std::min(safe.size(), kMaxNameLength - suffix.size())) + suffix;
}

// Reasoning the target's own provider and model produced.
bool IsOwnReasoning(const Event& event, const RenderTarget& target) {
  return StringField(event, "provider") == ProviderName(target.provider) && StringField(event, "model") == target.model;
}

bool KeepsReasoning(const Event& event, const RenderTarget& target) {
  if (!IsOwnReasoning(event, target)) return false;
  switch (target.provider) {
    case Provider::kOpenAI: return false;  // Chat Completions has no field for it
    case Provider::kAnthropic: return !StringField(event, "signature").empty() || !StringField(event, "encrypted").empty();
    case Provider::kGemini: return !StringField(event, "signature").empty();
  }
  return false;
}

uint64_t ReasoningTokens(const KeptReasoning& r, const TokenEstimator& est) {
  return est.PerMessage() + est.Text(r.text) + est.Text(r.signature) + est.Text(r.encrypted);
}

}  // namespace

std::string ContentText(const Json& content) { return content.is_string() ? content.get<std::string>() : content.dump(); }

std::string OrphanNoteText(const std::string& call_id, const Json& content) {
  return "[A tool result was recorded for call id \"" + call_id +
         "\", but the call itself is not in this conversation. Its content:]\n" + ContentText(content);
}

Conversation BuildConversation(const std::vector<Event>& all, const RenderTarget& target, const TokenEstimator& est) {
  std::vector<const Event*> events;
  for (const Event& event : all) {
    if (event.Conversation() == target.conversation) events.push_back(&event);
  }

  // Pair the k-th call of a call_id with the k-th result of that call_id, in journal order.
  std::map<std::string, std::deque<size_t>> results_by_id;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i]->type == "tool_result") results_by_id[StringField(*events[i], "call_id")].push_back(i);
  }
  std::vector<std::optional<size_t>> result_of(events.size());
  std::vector<bool> paired(events.size(), false);
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i]->type != "tool_call") continue;
    std::deque<size_t>& queue = results_by_id[StringField(*events[i], "call_id")];
    if (queue.empty()) continue;
    result_of[i] = queue.front();
    paired[queue.front()] = true;
    queue.pop_front();
  }

  Conversation out;
  std::vector<std::string> system_parts;
  std::map<std::string, size_t> tool_index;  // safe name -> index in out.tools
  std::map<std::string, std::string> journal_names;  // safe name -> the tool's name in the journal
  std::vector<std::pair<std::string, std::string>> called;  // (safe name, journal name), in order
  IdMapper ids;
  bool in_step = false;
  uint64_t step = 0, turn = 0;
  std::vector<KeptReasoning> pending;  // reasoning waiting for the output it belongs to
  std::set<uint64_t> partial;          // turns where some of the target's own reasoning is not kept

  auto end_step = [&] {
    in_step = false;
    if (!pending.empty()) partial.insert(turn);
    pending.clear();  // reasoning with no output after it in its step is not sent
  };
  auto begin_output = [&] {
    if (!in_step) {
      in_step = true;
      ++step;
    }
  };

  for (size_t i = 0; i < events.size(); ++i) {
    const Event& event = *events[i];
    const std::string& type = event.type;
    if (type == "system") {
      system_parts.push_back(StringField(event, "text"));
    } else if (type == "tool_defined") {
      ToolDeclaration decl{SafeToolName(StringField(event, "name")), StringField(event, "description"),
                           event.data.value("parameters", Json::object())};
      journal_names[decl.name] = StringField(event, "name");
      auto [it, added] = tool_index.emplace(decl.name, out.tools.size());
      if (added) {
        out.tools.push_back(std::move(decl));
      } else {
        out.tools[it->second] = std::move(decl);  // the latest definition wins, in its first place
      }
    } else if (type == "model_switch") {
      end_step();
    } else if (type == "user_message") {
      end_step();
      std::string text = StringField(event, "text");
      std::vector<AttachmentPart> attachments = Attachments(event, target);
      if (IsBlank(text) && attachments.empty()) continue;  // no provider accepts an empty message
      Unit unit;
      unit.from_user = true;
      unit.turn = ++turn;
      unit.text = std::move(text);
      unit.user_messages = 1;
      unit.first_ts = unit.last_ts = event.ts;
      unit.tokens = est.PerMessage() + est.Text(unit.text);
      // An attachment costs what crosses: its text, or its base64.
      for (const AttachmentPart& part : attachments) unit.tokens += est.Text(part.text.empty() ? part.base64 : part.text);
      unit.attachments = std::move(attachments);
      out.units.push_back(std::move(unit));
    } else if (type == "tool_result") {
      end_step();
      if (paired[i]) continue;  // sent beside its call
      Unit unit;
      unit.from_user = true;
      unit.turn = turn;
      unit.text = OrphanNoteText(StringField(event, "call_id"), event.data.value("content", Json("")));
      unit.first_ts = unit.last_ts = event.ts;
      unit.tokens = est.PerMessage() + est.Text(unit.text);
      out.units.push_back(std::move(unit));
    } else if (type == "reasoning") {
      begin_output();
      if (KeepsReasoning(event, target)) {
        pending.push_back({StringField(event, "text"), StringField(event, "signature"), StringField(event, "encrypted")});
      } else if (IsOwnReasoning(event, target)) {
        partial.insert(turn);
      }
    } else if (type == "assistant_message" || type == "tool_call") {
      begin_output();
      Unit unit;
      unit.step = step;
      unit.turn = turn;
      unit.first_ts = unit.last_ts = event.ts;
      if (type == "assistant_message") {
        unit.text = StringField(event, "text");
        if (IsBlank(unit.text)) continue;  // keeps `pending` for the step's next output
        unit.assistant_messages = 1;
        unit.tokens = est.PerMessage() + est.Text(unit.text);
      } else {
        ToolCall call;
        std::string journal_name = StringField(event, "name");
        call.id = ids.Map(StringField(event, "call_id"));
        call.name = SafeToolName(journal_name);
        call.arguments = event.data.value("arguments", Json::object());
        if (result_of[i]) {
          const Event& result = *events[*result_of[i]];
          call.result = result.data.value("content", Json(""));
          call.is_error = result.data.value("is_error", false);
          call.result_attachments = Attachments(result, target);
          unit.first_ts = std::min(unit.first_ts, result.ts);
          unit.last_ts = std::max(unit.last_ts, result.ts);
        } else {
          call.result = kLostResultText;
          call.is_error = true;
          call.result_lost = true;
        }
        unit.calls = 1;
        unit.tool = journal_name;
        unit.tokens = 2 * est.PerMessage() + est.Text(call.id) + est.Text(call.name) +
                      est.Text(call.arguments.dump()) + est.Text(ContentText(call.result));
        for (const AttachmentPart& part : call.result_attachments) {
          unit.tokens += est.Text(part.text.empty() ? part.base64 : part.text);
        }
        called.emplace_back(call.name, journal_name);
        unit.call = std::move(call);
      }
      unit.reasoning = std::move(pending);
      pending.clear();
      for (const KeptReasoning& r : unit.reasoning) unit.tokens += ReasoningTokens(r, est);
      out.units.push_back(std::move(unit));
    }
    // Other events (facts, runs) are not part of what a model is sent.
  }
  end_step();

  // Anthropic takes a turn's thinking whole or not at all (render.h, rule 1).
  if (target.provider == Provider::kAnthropic) {
    for (Unit& unit : out.units) {
      if (partial.count(unit.turn) == 0) continue;
      for (const KeptReasoning& r : unit.reasoning) unit.tokens -= ReasoningTokens(r, est);
      unit.reasoning.clear();
    }
  }

  // A provider may refuse a call to a tool it was not told of: declare every called tool.
  std::map<std::string, std::string> undeclared;
  for (const auto& [safe, journal_name] : called) {
    if (tool_index.count(safe) == 0) undeclared.emplace(safe, journal_name);
  }
  for (const auto& [safe, journal_name] : undeclared) {
    journal_names[safe] = journal_name;
    out.tools.push_back({safe, "No definition of this tool was recorded.", Json{{"type", "object"}}});
  }
  // A thread narrowed to some tools declares only those; its calls to others stay in its
  // history, with their results (history is never rewritten).
  if (target.tools) {
    std::vector<ToolDeclaration> narrowed;
    for (ToolDeclaration& tool : out.tools) {
      if (target.tools->count(journal_names[tool.name]) != 0) narrowed.push_back(std::move(tool));
    }
    out.tools = std::move(narrowed);
  }

  // The standing instructions open the system text, then the skills the agent may load.
  if (!IsBlank(target.instructions)) out.system = target.instructions;
  if (!target.skills.empty()) {
    std::string list = kSkillsHeading;
    for (const SkillSummary& skill : target.skills) list += "\n- " + skill.name + ": " + skill.description;
    out.system += (out.system.empty() ? "" : "\n\n") + list;
  }
  for (const std::string& part : system_parts) {
    if (part.empty()) continue;
    out.system += (out.system.empty() ? "" : "\n\n") + part;
  }
  if (!out.system.empty()) out.fixed_tokens += est.PerMessage() + est.Text(out.system);
  for (const ToolDeclaration& tool : out.tools) {
    out.fixed_tokens += est.PerMessage() + est.Text(tool.name) + est.Text(tool.description) + est.Text(tool.parameters.dump());
  }
  return out;
}

}  // namespace capsule::journal::render
