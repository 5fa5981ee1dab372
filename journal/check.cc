#include "journal/check.h"

#include <algorithm>
#include <thread>
#include <tuple>
#include <unordered_set>

namespace capsule::journal {

size_t CompleteLength(std::string_view text) {
  size_t last_newline = text.rfind('\n');
  return last_newline == std::string_view::npos ? 0 : last_newline + 1;
}

Result<std::vector<Event>> ParseJournalText(std::string_view text) {
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
      Result<Event> event = ParseEventLine(lines[i], "journal: line " + std::to_string(i + 1));
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
    const Event& event = events[i];
    auto fail = [&](const std::string& why) { return Status::Corruption("journal: " + DescribeEvent(event), why); };
    if (!ids.insert(event.id).second) return fail("duplicate: the same event appears twice");
    if (i > 0 && !EventOrderLess(events[i - 1], event)) {
      return fail("out of order: not after " + DescribeEvent(events[i - 1]) + " in (clock, machine, seq) order");
    }
    auto known = tail.machines.find(event.machine);
    uint64_t last_seq = known == tail.machines.end() ? 0 : known->second.seq;
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
    tail.Add(event);
  }
  return Status::Ok();
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
