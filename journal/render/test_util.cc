#include "journal/render/test_util.h"

#include <cstdio>
#include <sstream>

namespace capsule::journal::render::testing {

namespace {

TargetRequest Target(std::optional<std::string> provider, std::optional<std::string> model,
                     std::optional<uint64_t> context_tokens = std::nullopt, std::string conversation = "main") {
  TargetRequest request;
  request.provider = std::move(provider);
  request.model = std::move(model);
  request.context_tokens = context_tokens;
  request.conversation = std::move(conversation);
  return request;
}

}  // namespace

std::string TimestampAfter(uint64_t seconds) {
  // Days are enough for any test: 2026-12-02 plus up to 28 days stays in December.
  uint64_t day = 2 + seconds / 86400, rest = seconds % 86400;
  uint64_t hour = 16 * 3600 + 40 * 60 + rest;
  day += hour / 86400;
  hour %= 86400;
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "2026-12-%02lluT%02llu:%02llu:%02lluZ", static_cast<unsigned long long>(day),
                static_cast<unsigned long long>(hour / 3600), static_cast<unsigned long long>(hour / 60 % 60),
                static_cast<unsigned long long>(hour % 60));
  return buffer;
}

Event MakeEvent(const std::string& type, Json data, const std::string& ts, const Event* previous) {
  Event event;
  event.type = type;
  event.data = std::move(data);
  event.ts = ts;
  event.machine = "m1";
  event.seq = previous ? previous->seq + 1 : 1;
  event.clock = previous ? previous->clock + 1 : 1;
  if (previous) event.prev = previous->id;
  event.id = *event.ComputeId();
  return event;
}

Result<std::vector<Event>> EventsFromScript(const std::string& text, const std::string& name) {
  std::vector<Event> events;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::string where = name + " line " + std::to_string(number);
    CAPSULE_ASSIGN_OR_RETURN(Json object, ParseJson(line, where));
    if (!object.is_object() || !object.contains("type") || !object["type"].is_string()) {
      return Status::InvalidArgument(where, "needs {\"type\", \"data\"}");
    }
    std::string type = object["type"].get<std::string>();
    Json data = object.value("data", Json::object());
    CAPSULE_RETURN_IF_ERROR(CheckEventData(type, data));
    std::string ts = object.value("ts", TimestampAfter(60 * events.size()));
    events.push_back(MakeEvent(type, std::move(data), ts, events.empty() ? nullptr : &events.back()));
  }
  return events;
}

const std::vector<GoldenCase>& GoldenCases() {
  static const std::vector<GoldenCase> cases = {
      {"text.openai", "text", Target("openai", "gpt-4.1")},
      {"text.anthropic", "text", Target("anthropic", "claude-sonnet-4-5")},
      {"text.gemini", "text", Target("gemini", "gemini-2.5-pro")},
      {"text_side.openai", "text", Target("openai", "gpt-4.1", std::nullopt, "side")},
      {"tools.openai", "tools", Target("openai", "gpt-4.1")},
      {"tools.anthropic", "tools", Target("anthropic", "claude-sonnet-4-5")},
      {"tools.gemini", "tools", Target("gemini", "gemini-2.5-flash")},
      {"reasoning.openai", "reasoning", Target("openai", "o4-mini")},
      {"reasoning.anthropic", "reasoning", Target("anthropic", "claude-opus-4-1")},
      {"reasoning.gemini", "reasoning", Target("gemini", "gemini-3-pro-preview")},
      {"lost.openai", "lost", Target("openai", "gpt-4.1")},
      {"lost.anthropic", "lost", Target("anthropic", "claude-sonnet-4-5")},
      {"lost.gemini", "lost", Target("gemini", "gemini-2.5-pro")},
      // A -> B -> A: the current model of each journal, as the journal says.
      {"switch_a", "switch_a", Target(std::nullopt, std::nullopt)},
      {"switch_ab", "switch_ab", Target(std::nullopt, std::nullopt)},
      {"switch_aba", "switch_aba", Target(std::nullopt, std::nullopt)},
      {"trim.openai", "trim", Target("openai", "gpt-4.1", 400)},
      {"trim.anthropic", "trim", Target("anthropic", "claude-sonnet-4-5", 400)},
      {"trim.gemini", "trim", Target("gemini", "gemini-2.5-pro", 400)},
      // So tight that the newest step, three parallel calls, loses its first call and result.
      {"trim_tight.anthropic", "trim", Target("anthropic", "claude-sonnet-4-5", 170)},
      {"trim_tight.gemini", "trim", Target("gemini", "gemini-3-pro-preview", 170)},
      // Thinking blocks open their message however the step was recorded.
      {"merged.anthropic", "merged", Target(std::nullopt, std::nullopt)},
      // Gemini signatures recorded without thought text: never an empty thought part.
      {"signatures.gemini", "signatures", Target(std::nullopt, std::nullopt)},
      // Anthropic's thinking whole per turn or not at all; a window that keeps the last turn
      // whole from its user message on, and one that cuts into it.
      {"turns.anthropic", "turns", Target(std::nullopt, std::nullopt)},
      {"turns_whole.anthropic", "turns", Target(std::nullopt, std::nullopt, 310)},
      {"turns_cut.anthropic", "turns", Target(std::nullopt, std::nullopt, 275)},
  };
  return cases;
}

Result<std::string> RenderGolden(const GoldenCase& golden, const std::string& script_text) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> events, EventsFromScript(script_text, golden.script + ".jsonl"));
  CAPSULE_ASSIGN_OR_RETURN(RenderTarget target, ResolveTarget(events, golden.request));
  CAPSULE_ASSIGN_OR_RETURN(Json body, RenderRequest(events, target));
  return body.dump(2) + "\n";
}

}  // namespace capsule::journal::render::testing
