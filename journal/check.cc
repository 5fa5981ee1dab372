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

// Checks the complete lines `read` gives after `from.size` bytes, as continuing `from`, a
// block at a time; `hasher` has hashed those first bytes.
Result<CheckedJournal> CheckFrom(CheckedJournal from, const ReadAtFunction& read, const LineVisitor& visit, Sha256 hasher,
                                 size_t block) {
  JournalPosition start{from.size, from.lines + 1, std::move(from.tail), std::move(from.last)};
  BlockCheck check(read, std::move(start), block);
  CheckedBlock buffer;  // one block, filled again and again
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool more, check.Next(&buffer));
    if (!more) break;
    hasher.Update(buffer.text);
    if (!visit) continue;
    Status visited = Status::Ok();
    buffer.lines.ForEach([&](const EventLine& line) {
      if (visited.ok()) visited = visit(line);
    });
    CAPSULE_RETURN_IF_ERROR(visited);
  }
  JournalPosition end = check.position();
  CheckedJournal checked;
  checked.size = end.offset;
  checked.lines = end.next_line - 1;
  checked.tail = std::move(end.tail);
  checked.last = std::move(end.last);
  auto state = std::make_shared<const Sha256>(hasher);
  checked.sha256 = hasher.FinishHex();
  checked.hasher = std::move(state);
  return checked;
}

// The SHA-256 state after the first `length` bytes `read` gives; nullopt when it gives fewer.
Result<std::optional<Sha256>> HashPrefix(const ReadAtFunction& read, uint64_t length) {
  Sha256 hasher;
  CAPSULE_ASSIGN_OR_RETURN(uint64_t got, ReadPieces(read, 0, length, [&](std::string_view piece) { hasher.Update(piece); }));
  if (got < length) return std::optional<Sha256>();
  return std::optional<Sha256>(std::move(hasher));
}

// A block no larger than a text in memory needs (the buffer is zeroed when made).
size_t BlockFor(std::string_view text) { return std::min<size_t>(8 << 20, text.size() + 1); }

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

Result<CheckedJournal> CheckJournal(std::string_view text, const LineVisitor& visit) {
  return CheckFrom(CheckedJournal{}, TextReadAt(text), visit, Sha256(), BlockFor(text));
}

Result<CheckedJournal> CheckJournalGrowth(const CheckedJournal& from, std::string_view text, const LineVisitor& visit) {
  return CheckJournalGrowthAt(from, TextReadAt(text), visit, BlockFor(text));
}

Result<CheckedJournal> CheckJournalAppended(const CheckedJournal& from, std::string_view appended,
                                            const LineVisitor& visit) {
  // The appended bytes as the journal's, after the ones `from` covers.
  ReadAtFunction read = [text = TextReadAt(appended), base = from.size](uint64_t offset, char* buffer, size_t size) {
    return offset < base ? Result<size_t>(Status::FailedPrecondition("journal", "read before the appended bytes"))
                         : text(offset - base, buffer, size);
  };
  return CheckJournalAppendedAt(from, read, visit, BlockFor(appended));
}

Result<CheckedJournal> CheckJournalGrowthAt(const CheckedJournal& from, const ReadAtFunction& read,
                                            const LineVisitor& visit, size_t block) {
  if (from.size > 0) {
    CAPSULE_ASSIGN_OR_RETURN(std::optional<Sha256> prefix, HashPrefix(read, from.size));
    if (prefix && Sha256(*prefix).FinishHex() == from.sha256) return CheckFrom(from, read, visit, std::move(*prefix), block);
  }
  return CheckFrom(CheckedJournal{}, read, visit, Sha256(), block);
}

Result<CheckedJournal> CheckJournalAppendedAt(const CheckedJournal& from, const ReadAtFunction& read,
                                              const LineVisitor& visit, size_t block) {
  if (from.hasher == nullptr) return Status::FailedPrecondition("journal", "the check it continues kept no digest state");
  return CheckFrom(from, read, visit, Sha256(*from.hasher), block);
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
