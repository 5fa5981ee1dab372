#include "journal/scan.h"

#include <algorithm>
#include <cstring>
#include <thread>

namespace capsule::journal {

namespace {

constexpr size_t kBytesPerThread = 4 << 20;

// Reads the lines of `chunk` (whole lines, each with its newline) into `part`. On a bad line,
// its offset in `chunk` and false.
bool ScanChunk(std::string_view chunk, ScannedPart* part, size_t* bad_offset) {
  part->lines.reserve(chunk.size() / 256 + 1);
  size_t start = 0;
  while (start < chunk.size()) {
    const char* newline = static_cast<const char*>(std::memchr(chunk.data() + start, '\n', chunk.size() - start));
    size_t end = static_cast<size_t>(newline - chunk.data());
    std::string_view line = chunk.substr(start, end - start);
    EventLine fields;
    if (ReadEventLine(line, &fields)) {
      part->lines.push_back(fields);
    } else {
      // The slow path decides; the line number is only needed for a fault, found afterwards.
      Result<Event> event = ParseEventLine(line, "journal");
      if (!event.ok()) {
        *bad_offset = start;
        return false;
      }
      part->slow.push_back(std::move(event).value());
      part->lines.push_back(FieldsOf(part->slow.back(), line));
    }
    start = end + 1;
  }
  return true;
}

}  // namespace

size_t ScannedLines::size() const {
  size_t n = 0;
  for (const ScannedPart& part : parts) n += part.lines.size();
  return n;
}

const EventLine* ScannedLines::last() const {
  for (auto part = parts.rbegin(); part != parts.rend(); ++part) {
    if (!part->lines.empty()) return &part->lines.back();
  }
  return nullptr;
}

unsigned ScanThreads(size_t bytes) {
  unsigned cores = std::max(1u, std::min(4u, std::thread::hardware_concurrency()));
  return static_cast<unsigned>(std::clamp<size_t>(bytes / kBytesPerThread, 1, cores));
}

Result<ScannedLines> ScanLines(std::string_view text, uint64_t first_line, unsigned threads) {
  text = text.substr(0, CompleteLength(text));
  threads = std::max(1u, threads);
  // Parts of about equal size, each ending at a newline.
  std::vector<std::string_view> chunks;
  size_t start = 0;
  for (unsigned i = 1; i <= threads && start < text.size(); ++i) {
    size_t end = i == threads ? text.size() : std::max(start, text.size() * i / threads);
    if (end < text.size()) {
      size_t newline = text.find('\n', end == 0 ? 0 : end - 1);
      end = newline + 1;
    }
    if (end > start) chunks.push_back(text.substr(start, end - start));
    start = end;
  }
  ScannedLines scanned;
  scanned.parts.resize(chunks.size());
  std::vector<size_t> bad(chunks.size(), std::string_view::npos);
  auto scan = [&](size_t i) {
    size_t offset = 0;
    if (!ScanChunk(chunks[i], &scanned.parts[i], &offset)) bad[i] = offset;
  };
  std::vector<std::thread> workers;
  for (size_t i = 1; i < chunks.size(); ++i) workers.emplace_back(scan, i);
  if (!chunks.empty()) scan(0);
  for (std::thread& worker : workers) worker.join();
  for (size_t i = 0; i < chunks.size(); ++i) {
    if (bad[i] == std::string_view::npos) continue;
    // The first bad line, named as ParseEventLine names it, with its line number.
    size_t at = static_cast<size_t>(chunks[i].data() - text.data()) + bad[i];
    uint64_t number = first_line + static_cast<uint64_t>(std::count(text.begin(), text.begin() + at, '\n'));
    std::string_view line = text.substr(at, text.find('\n', at) - at);
    return ParseEventLine(line, "journal: line " + std::to_string(number)).status();
  }
  return scanned;
}

Status CheckChains(const ScannedLines& lines, JournalTail* tail, std::optional<EventLine> last) {
  return CheckChainsAfter(ScannedLines{}, lines, tail, last);
}

Status CheckChainsAfter(const ScannedLines& earlier, const ScannedLines& lines, JournalTail* tail,
                        std::optional<EventLine> last) {
  ChainCheck chain(tail, last);
  size_t index = 0;
  for (const ScannedPart& part : lines.parts) {
    for (const EventLine& line : part.lines) {
      Status status = chain.Next(line);
      if (!status.ok()) {
        // A line seen before fails the chain too (same machine and seq): it is named a duplicate.
        bool repeated = false;
        earlier.ForEach([&](const EventLine& seen) { repeated = repeated || seen.id == line.id; });
        size_t i = 0;
        lines.ForEach([&](const EventLine& seen) { repeated = repeated || (i++ < index && seen.id == line.id); });
        if (repeated) {
          return Status::Corruption("journal: " + DescribeLine(line), "duplicate: the same event appears twice");
        }
        return status;
      }
      ++index;
    }
  }
  return Status::Ok();
}

Status ChainCheck::Next(const EventLine& event) {
  auto fail = [&](const std::string& why) { return Status::Corruption("journal: " + DescribeLine(event), why); };
  if (previous_ && previous_->id == event.id) return fail("duplicate: the same event appears twice");
  if (previous_ && !LineOrderLess(*previous_, event)) {
    return fail("out of order: not after " + DescribeLine(*previous_) + " in (clock, machine, seq) order");
  }
  auto known = tail_->machines.find(event.machine);
  uint64_t last_seq = known == tail_->machines.end() ? 0 : known->second.seq;
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
  } else if (!event.prev.empty()) {
    return fail("seq 1 must have prev null");
  }
  tail_->Add(event);
  previous_ = event;
  return Status::Ok();
}

}  // namespace capsule::journal
