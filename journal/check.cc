#include "journal/check.h"

#include <algorithm>
#include <thread>
#include <tuple>
#include <unordered_set>

#include "capsule/base/sha256.h"

namespace capsule::journal {

size_t CompleteLength(std::string_view text) {
  size_t last_newline = text.rfind('\n');
  return last_newline == std::string_view::npos ? 0 : last_newline + 1;
}

namespace {

// Parses the complete lines of `text`, the first being line `first_line` of the journal.
Result<std::vector<Event>> ParseLines(std::string_view text, uint64_t first_line) {
  text = text.substr(0, CompleteLength(text));
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  // Lines parse independently: large journals are split between a few threads.
  constexpr size_t kLinesPerThread = 20000;
  size_t threads = std::clamp<size_t>(lines.size() / kLinesPerThread, 1,
                                      std::max(1u, std::min(4u, std::thread::hardware_concurrency())));
  std::vector<Event> events(lines.size());
  std::vector<Status> failures(threads);
  auto parse = [&](size_t part) {
    size_t begin = lines.size() * part / threads, end = lines.size() * (part + 1) / threads;
    for (size_t i = begin; i < end; ++i) {
      Result<Event> event = ParseEventLine(lines[i], "journal: line " + std::to_string(first_line + i));
      if (!event.ok()) {
        failures[part] = event.status();
        return;
      }
      events[i] = std::move(event).value();
    }
  };
  std::vector<std::thread> workers;
  for (size_t part = 1; part < threads; ++part) workers.emplace_back(parse, part);
  parse(0);
  for (std::thread& worker : workers) worker.join();
  for (const Status& failure : failures) {
    if (!failure.ok()) return failure;  // the first bad line: parts are in line order
  }
  return events;
}

// Checks that `event` may follow `previous` (the line before it, if any) in a journal whose
// machines end as `tail` says, and adds it to `tail`. Two lines with the same id would be
// the same machine and seq (the id digests both), which the seq rule refuses.
Status CheckNextEvent(const Event* previous, const Event& event, JournalTail* tail) {
  auto fail = [&](const std::string& why) { return Status::Corruption("journal: " + DescribeEvent(event), why); };
  if (previous != nullptr && previous->id == event.id) return fail("duplicate: the same event appears twice");
  if (previous != nullptr && !EventOrderLess(*previous, event)) {
    return fail("out of order: not after " + DescribeEvent(*previous) + " in (clock, machine, seq) order");
  }
  auto known = tail->machines.find(event.machine);
  uint64_t last_seq = known == tail->machines.end() ? 0 : known->second.seq;
  if (event.seq != last_seq + 1) {
    return fail(last_seq == 0 ? "the machine's first event has seq " + std::to_string(event.seq) + ", not 1"
                              : "seq " + std::to_string(event.seq) + " follows seq " + std::to_string(last_seq) +
                                    " (an event is missing or out of place)");
  }
  if (last_seq > 0) {
    if (event.prev != known->second.id) {
      return fail("prev does not link to seq " + std::to_string(last_seq) + " (" + known->second.id + ")");
    }
    if (event.clock <= known->second.clock) {
      return fail("clock " + std::to_string(event.clock) + " is not after clock " +
                  std::to_string(known->second.clock) + " of seq " + std::to_string(last_seq));
    }
  } else if (event.prev.has_value()) {
    return fail("seq 1 must have prev null");
  }
  tail->Add(event);
  return Status::Ok();
}

// Checks the complete lines of `text` after `from.size` bytes as continuing `from`.
Result<CheckedJournal> CheckFrom(CheckedJournal from, std::string_view text, std::vector<Event>* added) {
  size_t complete = CompleteLength(text);
  std::string_view grown = text.substr(from.size, complete - from.size);
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> events, ParseLines(grown, from.lines + 1));
  std::unordered_set<std::string> ids;
  ids.reserve(events.size());
  const Event* previous = from.last ? &*from.last : nullptr;
  for (const Event& event : events) {
    if (!ids.insert(event.id).second) {
      return Status::Corruption("journal: " + DescribeEvent(event), "duplicate: the same event appears twice");
    }
    CAPSULE_RETURN_IF_ERROR(CheckNextEvent(previous, event, &from.tail));
    previous = &event;
  }
  if (!events.empty()) from.last = events.back();
  from.lines += events.size();
  from.size = complete;
  from.sha256 = Sha256Hex(text.substr(0, complete));
  if (added != nullptr) {
    added->insert(added->end(), std::make_move_iterator(events.begin()), std::make_move_iterator(events.end()));
  }
  return from;
}

}  // namespace

Result<std::vector<Event>> ParseJournalText(std::string_view text) { return ParseLines(text, 1); }

void JournalTail::Add(const Event& event) {
  if (event.clock > max_clock) max_clock = event.clock;
  MachineTail& tail = machines[event.machine];
  if (event.seq > tail.seq) tail = MachineTail{event.seq, event.id, event.clock};
}

Status CheckEvents(const std::vector<Event>& events) {
  std::unordered_set<std::string> ids;
  ids.reserve(events.size());
  JournalTail tail;
  for (size_t i = 0; i < events.size(); ++i) {
    if (!ids.insert(events[i].id).second) {
      return Status::Corruption("journal: " + DescribeEvent(events[i]), "duplicate: the same event appears twice");
    }
    CAPSULE_RETURN_IF_ERROR(CheckNextEvent(i > 0 ? &events[i - 1] : nullptr, events[i], &tail));
  }
  return Status::Ok();
}

Result<CheckedJournal> CheckJournal(std::string_view text, std::vector<Event>* events) {
  return CheckFrom(CheckedJournal{}, text, events);
}

Result<CheckedJournal> CheckJournalGrowth(const CheckedJournal& from, std::string_view text, std::vector<Event>* added) {
  if (from.size > 0 && text.size() >= from.size && Sha256Hex(text.substr(0, from.size)) == from.sha256) {
    return CheckFrom(from, text, added);
  }
  return CheckJournal(text, added);
}

Result<std::vector<Event>> ReadJournalText(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<Event> events, ParseJournalText(text));
  CAPSULE_RETURN_IF_ERROR(CheckEvents(events));
  return events;
}

std::vector<std::string> CheckJournalText(const std::string& text) {
  Result<std::vector<Event>> events = ReadJournalText(text);
  if (events.ok()) return {};
  return {events.status().message()};
}

}  // namespace capsule::journal
