#include "journal/check.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <tuple>
#include <unordered_set>

#include "capsule/base/sha256.h"
#include "journal/block_check.h"
#include "journal/scan.h"

namespace capsule::journal {

size_t CompleteLength(std::string_view text) {
  size_t last_newline = text.rfind('\n');
  return last_newline == std::string_view::npos ? 0 : last_newline + 1;
}

namespace {

// The whole events of `lines` (data parsed), on a few threads.
Result<std::vector<Event>> BuildEvents(const ScannedLines& lines, uint64_t first_line) {
  std::vector<Event> events(lines.size());
  std::vector<Status> failures(lines.parts.size());
  auto build = [&](size_t part) {
    size_t index = 0;
    for (size_t p = 0; p < part; ++p) index += lines.parts[p].lines.size();
    for (const EventLine& line : lines.parts[part].lines) {
      Result<Event> event = ToEvent(line, "journal: line " + std::to_string(first_line + index));
      if (!event.ok()) {
        failures[part] = event.status();
        return;
      }
      events[index++] = std::move(event).value();
    }
  };
  std::vector<std::thread> workers;
  for (size_t part = 1; part < lines.parts.size(); ++part) workers.emplace_back(build, part);
  if (!lines.parts.empty()) build(0);
  for (std::thread& worker : workers) worker.join();
  for (const Status& failure : failures) {
    if (!failure.ok()) return failure;
  }
  return events;
}

// Checks the complete lines of `grown`, the bytes after the `from.size` bytes `from` covers,
// as continuing `from`; `hasher` has hashed those first bytes.
Result<CheckedJournal> CheckGrown(CheckedJournal from, std::string_view grown, std::vector<Event>* added, Sha256 hasher) {
  grown = grown.substr(0, CompleteLength(grown));
  CAPSULE_ASSIGN_OR_RETURN(ScannedLines lines, ScanLines(grown, from.lines + 1, ScanThreads(grown.size())));
  std::optional<EventLine> last;
  if (from.last) last = FieldsOf(*from.last, "");
  CAPSULE_RETURN_IF_ERROR(CheckChains(lines, &from.tail, last));
  size_t count = lines.size();
  if (count > 0) {
    CAPSULE_ASSIGN_OR_RETURN(Event event, ToEvent(*lines.last(), "journal"));
    from.last = std::move(event);
  }
  if (added != nullptr) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> events, BuildEvents(lines, from.lines + 1));
    added->insert(added->end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
  }
  from.lines += count;
  from.size += grown.size();
  hasher.Update(grown);
  auto state = std::make_shared<const Sha256>(hasher);
  from.sha256 = hasher.FinishHex();
  from.hasher = std::move(state);
  return from;
}

}  // namespace

Result<std::vector<Event>> ParseJournalText(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(ScannedLines lines, ScanLines(text, 1, ScanThreads(text.size())));
  return BuildEvents(lines, 1);
}

void JournalTail::Add(const Event& event) {
  if (event.clock > max_clock) max_clock = event.clock;
  MachineTail& tail = machines[event.machine];
  if (event.seq > tail.seq) tail = MachineTail{event.seq, event.id, event.clock};
}

void JournalTail::Add(const EventLine& event) {
  if (event.clock > max_clock) max_clock = event.clock;
  auto it = machines.find(event.machine);
  if (it == machines.end()) it = machines.emplace(std::string(event.machine), MachineTail{}).first;
  MachineTail& tail = it->second;
  if (event.seq > tail.seq) {
    tail.seq = event.seq;
    tail.id.assign(event.id);  // in place: no allocation once the machine is known
    tail.clock = event.clock;
  }
}

Status CheckEvents(const std::vector<Event>& events) {
  std::unordered_set<std::string_view> ids;
  ids.reserve(events.size());
  JournalTail tail;
  ChainCheck chain(&tail, std::nullopt);
  for (const Event& event : events) {
    if (!ids.insert(event.id).second) {
      return Status::Corruption("journal: " + DescribeEvent(event), "duplicate: the same event appears twice");
    }
    CAPSULE_RETURN_IF_ERROR(chain.Next(FieldsOf(event, "")));
  }
  return Status::Ok();
}

Result<CheckedJournal> CheckJournal(std::string_view text, std::vector<Event>* events) {
  return CheckGrown(CheckedJournal{}, text, events, Sha256());
}

Result<CheckedJournal> CheckJournalGrowth(const CheckedJournal& from, std::string_view text, std::vector<Event>* added) {
  if (from.size > 0 && text.size() >= from.size) {
    Sha256 hasher;
    hasher.Update(text.substr(0, from.size));
    if (Sha256(hasher).FinishHex() == from.sha256) return CheckGrown(from, text.substr(from.size), added, std::move(hasher));
  }
  return CheckJournal(text, added);
}

Result<CheckedJournal> CheckJournalAppended(const CheckedJournal& from, std::string_view appended,
                                            std::vector<Event>* added) {
  if (from.hasher == nullptr) return Status::FailedPrecondition("journal", "the check it continues kept no digest state");
  return CheckGrown(from, appended, added, Sha256(*from.hasher));
}

Result<std::vector<Event>> ReadJournalText(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(ScannedLines lines, ScanLines(text, 1, ScanThreads(text.size())));
  JournalTail tail;
  CAPSULE_RETURN_IF_ERROR(CheckChains(lines, &tail, std::nullopt));
  return BuildEvents(lines, 1);
}

Status VerifyJournalText(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(ScannedLines lines, ScanLines(text, 1, ScanThreads(text.size())));
  JournalTail tail;
  return CheckChains(lines, &tail, std::nullopt);
}

Result<JournalPosition> ContinueJournalAt(const ReadAtFunction& read, JournalPosition from, size_t block) {
  BlockCheck check(read, std::move(from), block);
  CheckedBlock buffer;  // one block, filled again and again
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool more, check.Next(&buffer));
    if (!more) return check.position();
  }
}

Status VerifyJournalAt(const ReadAtFunction& read, size_t block) {
  Result<JournalPosition> end = ContinueJournalAt(read, JournalPosition{}, block);
  if (end.ok() || end.status().code() == Code::kIOError) return end.status();
  // Named as the whole text's check names it (which may be another fault further on: it
  // reads every line before it checks the chains).
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadAll(read));
  return VerifyJournalText(text);
}

std::vector<std::string> CheckJournalAt(const ReadAtFunction& read) {
  Status status = VerifyJournalAt(read);
  if (status.ok()) return {};
  return {status.message()};
}

std::vector<std::string> CheckJournalText(std::string_view text) { return CheckJournalAt(TextReadAt(text)); }

}  // namespace capsule::journal
