#include "journal/merge_text.h"

#include <unordered_map>

#include "journal/check.h"
#include "journal/merge_stream.h"

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
  Result<MergeSide> ours = CheckMergeSide(held);
  if (!ours.ok()) return ours.status().WithContext("merge: the journal held here");
  Result<MergeSide> theirs = CheckMergeSide(arriving);
  if (!theirs.ok()) return theirs.status().WithContext("merge: the arriving journal");
  std::string out;
  out.reserve(held.size() + arriving.size() / 2);
  CAPSULE_ASSIGN_OR_RETURN(MergeCounts counts, MergeSides(*ours, *theirs, [&](std::string_view piece) {
                             out.append(piece);
                             return Status::Ok();
                           }));
  if (counts.added == 0) return std::string(ours->text);
  return out;
}

}  // namespace capsule::journal
