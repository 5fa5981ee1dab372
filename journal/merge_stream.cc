#include "journal/merge_stream.h"

#include <limits>
#include <thread>
#include <unordered_map>

namespace capsule::journal {

namespace {

// Walks the lines of one side in order.
class Cursor {
 public:
  explicit Cursor(const ScannedLines& lines) : lines_(lines) { Settle(); }
  const EventLine* head() const { return part_ < lines_.parts.size() ? &lines_.parts[part_].lines[index_] : nullptr; }
  size_t position() const { return position_; }
  void Advance() {
    ++index_;
    ++position_;
    Settle();
  }

 private:
  void Settle() {
    while (part_ < lines_.parts.size() && index_ >= lines_.parts[part_].lines.size()) {
      ++part_;
      index_ = 0;
    }
  }
  const ScannedLines& lines_;
  size_t part_ = 0, index_ = 0, position_ = 0;
};

// The merged text as runs of lines that lie next to each other in one side's text: a run is
// written whole when the next line is not its continuation.
class RunWriter {
 public:
  explicit RunWriter(const std::function<Status(std::string_view)>& write) : write_(write) {}
  // Adds `line` (and its newline) to the merged text; nothing is written before Start.
  Status Add(std::string_view line) {
    const char* begin = line.data();
    if (end_ != begin) {
      CAPSULE_RETURN_IF_ERROR(Flush());
      begin_ = begin;
    }
    end_ = begin + line.size() + 1;
    return Status::Ok();
  }
  void Start() { started_ = true; }
  Status Flush() {
    Status status;
    if (started_ && end_ != begin_) status = write_(std::string_view(begin_, static_cast<size_t>(end_ - begin_)));
    begin_ = end_;
    return status;
  }

 private:
  const std::function<Status(std::string_view)>& write_;
  bool started_ = false;
  const char* begin_ = nullptr;
  const char* end_ = nullptr;
};

// What the merge knows of one machine's chain on the two sides.
struct MachineState {
  uint64_t ours = 0, theirs = 0;  // the last seq taken from each side
  // The first event taken from one side alone since the two were level: the other side's
  // event of the same seq must be this one, or the chains conflict.
  std::string_view ahead_id;
  size_t ahead_their_position = 0;  // when it is theirs: its position in their journal
  bool conflicted = false;
};

Status Conflict(std::string_view machine, uint64_t seq, std::string_view ours, std::string_view theirs) {
  return Status::Corruption("merge: conflicting events for machine " + std::string(machine) + ", seq " +
                                std::to_string(seq),
                            "event " + std::string(ours) + " here, event " + std::string(theirs) +
                                " in the other journal; refusing to merge");
}

}  // namespace

Result<MergeSide> CheckMergeSide(std::string_view text) {
  MergeSide side;
  side.text = text.substr(0, CompleteLength(text));
  CAPSULE_ASSIGN_OR_RETURN(side.lines, ScanLines(side.text, 1, ScanThreads(side.text.size())));
  CAPSULE_RETURN_IF_ERROR(CheckChains(side.lines, &side.tail, std::nullopt));
  return side;
}

Result<MergeCounts> MergeSides(const MergeSide& ours, const MergeSide& theirs,
                               const std::function<Status(std::string_view)>& write) {
  Cursor a(ours.lines), b(theirs.lines);
  RunWriter out(write);
  std::unordered_map<std::string_view, MachineState> machines;
  MergeCounts counts;
  Status conflict;
  size_t conflict_position = std::numeric_limits<size_t>::max();
  auto note_conflict = [&](size_t their_position, Status status) {
    if (their_position < conflict_position) {
      conflict_position = their_position;
      conflict = std::move(status);
    }
  };
  while (a.head() != nullptr || b.head() != nullptr) {
    const EventLine* x = a.head();
    const EventLine* y = b.head();
    bool same_key = x && y && x->clock == y->clock && x->seq == y->seq && x->machine == y->machine;
    if (same_key) {
      // Both sides hold this machine's event of this seq: the same one, or a conflict.
      MachineState& state = machines[x->machine];
      if (x->id != y->id && !state.conflicted) {
        note_conflict(b.position(), Conflict(x->machine, x->seq, x->id, y->id));
        state.conflicted = true;
      }
      state.ours = state.theirs = x->seq;
      counts.last_line = x->line;
      if (conflict.ok()) CAPSULE_RETURN_IF_ERROR(out.Add(x->line));
      a.Advance();
      b.Advance();
      continue;
    }
    bool take_ours = y == nullptr || (x != nullptr && LineOrderLess(*x, *y));
    const EventLine& event = take_ours ? *x : *y;
    MachineState& state = machines[event.machine];
    uint64_t& mine = take_ours ? state.ours : state.theirs;
    uint64_t other = take_ours ? state.theirs : state.ours;
    if (!state.conflicted) {
      if (other >= event.seq) {
        // The other side already took its event of this seq, alone: a different one.
        if (take_ours) {
          note_conflict(state.ahead_their_position, Conflict(event.machine, event.seq, event.id, state.ahead_id));
        } else {
          note_conflict(b.position(), Conflict(event.machine, event.seq, state.ahead_id, event.id));
        }
        state.conflicted = true;
      } else if (mine == other) {
        state.ahead_id = event.id;
        state.ahead_their_position = b.position();
      }
    }
    mine = event.seq;
    counts.last_line = event.line;
    if (!take_ours) {
      ++counts.added;
      out.Start();
    }
    if (conflict.ok()) CAPSULE_RETURN_IF_ERROR(out.Add(event.line));  // after a conflict, only looking
    (take_ours ? a : b).Advance();
  }
  if (!conflict.ok()) return conflict;
  CAPSULE_RETURN_IF_ERROR(out.Flush());
  counts.total = ours.lines.size() + counts.added;
  counts.tail = ours.tail;
  for (const auto& [machine, tail] : theirs.tail.machines) {
    MachineTail& merged = counts.tail.machines[machine];
    if (tail.seq > merged.seq) merged = tail;
  }
  counts.tail.max_clock = std::max(ours.tail.max_clock, theirs.tail.max_clock);
  return counts;
}

}  // namespace capsule::journal
