#include "journal/merge_text.h"

#include <map>
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

namespace {

Result<std::vector<Event>> ParseLines(std::string_view text, const std::string& where) {
  std::vector<Event> events;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) break;  // a torn tail: never acknowledged
    CAPSULE_ASSIGN_OR_RETURN(Event event, ParseEventLine(text.substr(pos, end - pos), where));
    events.push_back(std::move(event));
    pos = end + 1;
  }
  return events;
}

}  // namespace

Status CheckSharedPrefix(std::string_view held, std::string_view arriving) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> ours, ParseLines(held, "the journal held here"));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> theirs, ParseLines(arriving, "the arriving journal"));
  // (machine, seq) -> the event held here.
  std::map<std::pair<std::string, uint64_t>, const Event*> chains;
  for (const Event& event : ours) chains[{event.machine, event.seq}] = &event;
  for (const Event& event : theirs) {
    auto it = chains.find({event.machine, event.seq});
    if (it == chains.end() || it->second->id == event.id) continue;
    const Event& mine = *it->second;
    std::string conversation = mine.Conversation();
    if (event.Conversation() != conversation) conversation += " (" + event.Conversation() + " in the stream)";
    return Status::FailedPrecondition(
        "conversation " + conversation,
        "the stream does not extend what is held here: the first event that differs is machine " + event.machine +
            ", seq " + std::to_string(event.seq) + ": event " + mine.id + " (" + mine.type + ") here, event " + event.id +
            " (" + event.type + ") in the stream; the stream is refused");
  }
  return Status::Ok();
}

Result<std::string> MergeJournalTexts(std::string_view held, std::string_view arriving) {
  CAPSULE_ASSIGN_OR_RETURN(MergeInput input, CheckMergeSides(held, arriving, "merge: the journal held here",
                                                             "merge: the arriving journal"));
  std::string out;
  out.reserve(held.size() + arriving.size() / 2);
  CAPSULE_ASSIGN_OR_RETURN(MergeCounts counts, MergeSides(input.ours, input.theirs, [&](std::string_view piece) {
                             out.append(piece);
                             return Status::Ok();
                           }));
  if (counts.added == 0) return std::string(input.ours.text);
  return out;
}

}  // namespace capsule::journal
