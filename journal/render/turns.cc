#include "journal/render/providers.h"

namespace capsule::journal::render {

std::vector<Turn> Turns(const Conversation& conversation, const Window& window) {
  std::vector<Turn> turns;
  if (!window.lead.empty()) turns.push_back({Turn::Kind::kUser, window.lead, {}});
  const std::vector<Unit>& units = conversation.units;
  for (size_t i = window.first; i < units.size();) {
    if (units[i].from_user) {
      turns.push_back({Turn::Kind::kUser, units[i].text, {&units[i]}});
      ++i;
      continue;
    }
    Turn assistant{Turn::Kind::kAssistant, "", {}};
    Turn results{Turn::Kind::kResults, "", {}};
    const uint64_t step = units[i].step;
    for (; i < units.size() && !units[i].from_user && units[i].step == step; ++i) {
      assistant.units.push_back(&units[i]);
      if (units[i].call) results.units.push_back(&units[i]);
    }
    turns.push_back(std::move(assistant));
    if (!results.units.empty()) turns.push_back(std::move(results));
  }
  return turns;
}

}  // namespace capsule::journal::render
