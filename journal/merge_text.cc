#include "journal/merge_text.h"

#include <unordered_map>

#include "journal/check.h"

namespace capsule::journal {

Result<std::vector<const Event*>> EventsToAdd(const std::vector<Event>& ours, const std::vector<Event>& theirs) {
  // Each machine's chain here, by seq: a chain is whole from seq 1, so seq k is at k - 1.
  std::unordered_map<std::string, std::vector<const Event*>> chains;
  for (const Event& event : ours) chains[event.machine].push_back(&event);
  std::vector<const Event*> added;
  for (const Event& event : theirs) {
    const std::vector<const Event*>& chain = chains[event.machine];
    if (event.seq > chain.size()) {
      added.push_back(&event);
    } else if (chain[event.seq - 1]->id != event.id) {
      return Status::Corruption("merge: conflicting events for machine " + event.machine + ", seq " +
                                    std::to_string(event.seq),
                                "event " + chain[event.seq - 1]->id + " here, event " + event.id +
                                    " in the other journal; refusing to merge");
    }
  }
  return added;
}

Result<std::string> MergeJournalTexts(std::string_view held, std::string_view arriving) {
  Result<std::vector<Event>> ours = ReadJournalText(held);
  if (!ours.ok()) return ours.status().WithContext("merge: the journal held here");
  Result<std::vector<Event>> theirs = ReadJournalText(arriving);
  if (!theirs.ok()) return theirs.status().WithContext("merge: the arriving journal");
  CAPSULE_ASSIGN_OR_RETURN(std::vector<const Event*> added, EventsToAdd(*ours, *theirs));
  std::string out;
  size_t line_start = 0, i = 0, j = 0;
  while (i < ours->size() || j < added.size()) {
    bool take_ours = j == added.size() || (i < ours->size() && EventOrderLess((*ours)[i], *added[j]));
    if (take_ours) {
      size_t end = held.find('\n', line_start);
      out.append(held.substr(line_start, end - line_start + 1));
      line_start = end + 1;
      ++i;
    } else {
      CAPSULE_ASSIGN_OR_RETURN(std::string line, added[j]->CanonicalLine());
      out += line;
      out += '\n';
      ++j;
    }
  }
  return out;
}

}  // namespace capsule::journal
