#include "journal/render/trim.h"

#include <set>
#include <vector>

namespace capsule::journal::render {

namespace {

constexpr size_t kToolsListed = 8;

// What the dropped units held, gathered one unit at a time.
struct Dropped {
  uint64_t user_messages = 0, assistant_messages = 0, calls = 0, notes = 0;
  std::set<std::string> tools;
  std::string first_ts, last_ts;

  void Add(const Unit& unit) {
    user_messages += unit.user_messages;
    assistant_messages += unit.assistant_messages;
    calls += unit.calls;
    if (unit.from_user && unit.user_messages == 0) ++notes;
    if (!unit.tool.empty()) tools.insert(unit.tool);
    if (!unit.first_ts.empty() && (first_ts.empty() || unit.first_ts < first_ts)) first_ts = unit.first_ts;
    if (unit.last_ts > last_ts) last_ts = unit.last_ts;
  }

  std::string Text() const {
    auto count = [](uint64_t n, const char* one, const char* many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    std::vector<std::string> parts = {count(user_messages, "user message", "user messages"),
                                      count(assistant_messages, "assistant message", "assistant messages")};
    if (notes > 0) parts.push_back(count(notes, "orphan tool result", "orphan tool results"));
    std::string calls_part = count(calls, "tool call", "tool calls");
    if (!tools.empty()) {
      calls_part += " (tools: ";
      size_t listed = 0;
      for (const std::string& tool : tools) {
        if (listed == kToolsListed) break;
        calls_part += (listed++ > 0 ? ", " : "") + tool;
      }
      if (tools.size() > kToolsListed) calls_part += " and " + std::to_string(tools.size() - kToolsListed) + " more";
      calls_part += ")";
    }
    parts.push_back(calls_part);
    std::string text = "[Earlier conversation omitted to fit the context window: ";
    for (size_t i = 0; i < parts.size(); ++i) {
      text += parts[i];
      if (i + 2 < parts.size()) text += ", ";
      if (i + 2 == parts.size()) text += " and ";
    }
    if (!first_ts.empty()) text += ", from " + first_ts + " to " + last_ts;
    return text + ".]";
  }
};

}  // namespace

std::string DigestText(const Conversation& conversation, size_t end) {
  Dropped dropped;
  for (size_t i = 0; i < end && i < conversation.units.size(); ++i) dropped.Add(conversation.units[i]);
  return dropped.Text();
}

Result<Window> ChooseWindow(const Conversation& conversation, std::optional<uint64_t> budget,
                            const TokenEstimator& est) {
  const std::vector<Unit>& units = conversation.units;
  if (units.empty()) return Status::InvalidArgument("render", "the conversation has no message to send");
  const size_t n = units.size();
  auto lead_cost = [&](const std::string& text) { return text.empty() ? 0 : est.PerMessage() + est.Text(text); };
  auto opening = [&](size_t first) { return units[first].from_user ? std::string() : std::string(kOpeningText); };

  Window window;
  if (!units.back().from_user && !units.back().call) window.trail = kContinueText;
  const uint64_t fixed = conversation.fixed_tokens + lead_cost(window.trail);

  // suffix[c]: the cost of units c..n-1.
  std::vector<uint64_t> suffix(n + 1, 0);
  for (size_t c = n; c-- > 0;) suffix[c] = suffix[c + 1] + units[c].tokens;

  window.lead = opening(0);
  window.tokens = fixed + suffix[0] + lead_cost(window.lead);
  if (!budget || window.tokens <= *budget) return window;

  // The first cut where the units alone fit, then cut further until the digest fits too.
  size_t cut = 1;
  while (cut < n && fixed + suffix[cut] > *budget) ++cut;
  if (cut < n) {
    Dropped dropped;
    for (size_t i = 0; i < cut; ++i) dropped.Add(units[i]);
    for (; cut < n; dropped.Add(units[cut]), ++cut) {
      std::string digest = dropped.Text();
      uint64_t tokens = fixed + suffix[cut] + lead_cost(digest);
      if (tokens <= *budget) {
        window.first = cut;
        window.lead = std::move(digest);
        window.tokens = tokens;
        return window;
      }
    }
  }
  // Not even the newest unit fits beside the digest: the newest unit alone, if it fits.
  window.first = n - 1;
  window.lead = opening(n - 1);
  window.tokens = fixed + suffix[n - 1] + lead_cost(window.lead);
  if (window.tokens <= *budget) return window;
  return Status::FailedPrecondition(
      "render: --context-tokens " + std::to_string(*budget),
      "too small: the system instructions and tool declarations take " + std::to_string(conversation.fixed_tokens) +
          " tokens and the newest message " + std::to_string(window.tokens - conversation.fixed_tokens) +
          " (as estimated)");
}

}  // namespace capsule::journal::render
