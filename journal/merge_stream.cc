#include "journal/merge_stream.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

#include "journal/event.h"

namespace capsule::journal {

namespace {

// Walks the lines of a side read whole: the common lines, then its own.
class WholeCursor final : public MergeCursor {
 public:
  explicit WholeCursor(const MergeSide& side) : side_(side), lists_{side.common.get(), &side.own} { Settle(); }
  const EventLine* head() const override {
    return list_ < 2 ? &lists_[list_]->parts[part_].lines[index_] : nullptr;
  }
  Status Advance(const std::function<Status()>&) override {  // the text stays whole throughout
    ++index_;
    ++position_;
    Settle();
    return Status::Ok();
  }
  // Of ours only (theirs' common lines lie in ours' text).
  uint64_t offset() const override {
    const EventLine* line = head();
    return line ? static_cast<uint64_t>(line->line.data() - side_.text.data()) : side_.text.size();
  }
  const JournalTail& tail() const override { return side_.tail; }
  std::string_view TakePassed() override {
    uint64_t end = offset();
    std::string_view passed = side_.text.substr(mark_, end - mark_);
    mark_ = end;
    return passed;
  }

 private:
  void Settle() {
    while (list_ < 2) {
      const ScannedLines& lines = *lists_[list_];
      if (part_ < lines.parts.size() && index_ < lines.parts[part_].lines.size()) return;
      if (part_ < lines.parts.size()) {
        ++part_;
      } else {
        ++list_;
        part_ = 0;
      }
      index_ = 0;
    }
  }
  const MergeSide& side_;
  const ScannedLines* lists_[2];
  size_t list_ = 0, part_ = 0, index_ = 0;
  uint64_t mark_ = 0;
};

// The merged text as runs of lines that lie next to each other in one side's text: a run is
// written whole when the next line is not its continuation.
class RunWriter {
 public:
  explicit RunWriter(const std::function<Status(std::string_view)>& write) : write_(write) {}
  // Adds `line` (and its newline) to the merged text, once started.
  Status Add(std::string_view line) {
    if (!started_) return Status::Ok();
    const char* begin = line.data();
    if (end_ != begin) {
      CAPSULE_RETURN_IF_ERROR(Flush());
      begin_ = begin;
    }
    end_ = begin + line.size() + 1;
    return Status::Ok();
  }
  void Start() { started_ = true; }
  bool started() const { return started_; }
  Status Flush() {
    Status status;
    if (end_ != begin_) status = write_(std::string_view(begin_, static_cast<size_t>(end_ - begin_)));
    begin_ = end_ = nullptr;
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
  std::string ahead_id;
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

size_t CommonLinesLength(std::string_view a, std::string_view b) {
  size_t n = std::min(a.size(), b.size());
  // Whole blocks first (memcmp at memory speed), then the first block that differs byte by byte.
  constexpr size_t kBlock = 64 << 10;
  size_t same = 0;
  while (same + kBlock <= n && std::memcmp(a.data() + same, b.data() + same, kBlock) == 0) same += kBlock;
  same = static_cast<size_t>(std::mismatch(a.begin() + same, a.begin() + n, b.begin() + same).first - a.begin());
  size_t newline = a.substr(0, same).rfind('\n');
  return newline == std::string_view::npos ? 0 : newline + 1;
}

Result<MergeInput> CheckMergeSides(std::string_view ours_text, std::string_view theirs_text,
                                   const std::string& ours_name, const std::string& theirs_name) {
  MergeInput input;
  MergeSide& ours = input.ours;
  MergeSide& theirs = input.theirs;
  ours.text = ours_text.substr(0, CompleteLength(ours_text));
  theirs.text = theirs_text.substr(0, CompleteLength(theirs_text));
  size_t common_length = CommonLinesLength(ours.text, theirs.text);
  std::string_view common_text = ours.text.substr(0, common_length);
  std::string_view ours_rest = ours.text.substr(common_length);
  std::string_view theirs_rest = theirs.text.substr(common_length);

  // Ours as ReadJournalText checks it: every line read, then the chains.
  auto ours_fault = [&](const Status& status) { return status.WithContext(ours_name); };
  Result<ScannedLines> common = ScanLines(common_text, 1, ScanThreads(common_text.size()));
  if (!common.ok()) return ours_fault(common.status());
  uint64_t common_lines = common->size();
  Result<ScannedLines> own = ScanLines(ours_rest, common_lines + 1, ScanThreads(ours_rest.size()));
  if (!own.ok()) return ours_fault(own.status());
  JournalTail common_tail;
  Status status = CheckChains(*common, &common_tail, std::nullopt);
  if (!status.ok()) return ours_fault(status);
  std::optional<EventLine> common_last;
  if (const EventLine* last = common->last()) common_last = *last;
  ours.tail = common_tail;
  status = CheckChainsAfter(*common, *own, &ours.tail, common_last);
  if (!status.ok()) return ours_fault(status);
  ours.own = std::move(own).value();
  ours.common = std::make_shared<const ScannedLines>(std::move(common).value());

  // Theirs after the lines both begin with, which are checked.
  auto theirs_fault = [&](const Status& status) { return status.WithContext(theirs_name); };
  Result<ScannedLines> their_own = ScanLines(theirs_rest, common_lines + 1, ScanThreads(theirs_rest.size()));
  if (!their_own.ok()) return theirs_fault(their_own.status());
  theirs.tail = std::move(common_tail);
  status = CheckChainsAfter(*ours.common, *their_own, &theirs.tail, common_last);
  if (!status.ok()) return theirs_fault(status);
  theirs.own = std::move(their_own).value();
  theirs.common = ours.common;
  return input;
}

Result<MergeCounts> MergeSides(MergeCursor& a, MergeCursor& b, const MergeOutput& output) {
  RunWriter out(output.write);
  // Keyed by owned names: a streamed side's lines do not outlive their block.
  std::map<std::string, MachineState, std::less<>> machines;
  auto machine_state = [&](std::string_view machine) -> MachineState& {
    auto it = machines.find(machine);
    if (it == machines.end()) it = machines.emplace(std::string(machine), MachineState{}).first;
    return it->second;
  };
  MergeCounts counts;
  std::string_view last_line;  // a view until a block is released, then a copy
  std::string last_line_copy;
  Status conflict;
  auto release = [&](bool ours) -> Status {
    last_line_copy.assign(last_line);
    last_line = last_line_copy;
    if (ours && !out.started() && conflict.ok()) CAPSULE_RETURN_IF_ERROR(output.passed(a.TakePassed()));
    CAPSULE_RETURN_IF_ERROR(out.Flush());
    return output.settle();
  };
  std::function<Status()> release_ours = [&] { return release(true); };
  std::function<Status()> release_theirs = [&] { return release(false); };
  size_t conflict_position = std::numeric_limits<size_t>::max();
  auto note_conflict = [&](size_t their_position, Status status) {
    if (their_position < conflict_position) {
      conflict_position = their_position;
      conflict = std::move(status);
    }
  };
  CAPSULE_RETURN_IF_ERROR(a.Ready());
  bool theirs_ready = false;
  for (;;) {
    const EventLine* x = a.head();
    if (x != nullptr && b.Shares(a.offset())) {
      // A line both sides begin with, given by ours alone: theirs starts after these.
      MachineState& state = machine_state(x->machine);
      state.ours = state.theirs = x->seq;
      last_line = x->line;
      if (conflict.ok()) CAPSULE_RETURN_IF_ERROR(out.Add(x->line));
      CAPSULE_RETURN_IF_ERROR(a.Advance(release_ours));
      continue;
    }
    if (!theirs_ready) {
      CAPSULE_RETURN_IF_ERROR(b.Ready());
      theirs_ready = true;
    }
    const EventLine* y = b.head();
    if (x == nullptr && y == nullptr) break;
    bool same_key = x && y && x->clock == y->clock && x->seq == y->seq && x->machine == y->machine;
    if (same_key) {
      // Both sides hold this machine's event of this seq: the same one, or a conflict.
      MachineState& state = machine_state(x->machine);
      if (x->id != y->id && !state.conflicted) {
        note_conflict(b.position(), Conflict(x->machine, x->seq, x->id, y->id));
        state.conflicted = true;
      }
      state.ours = state.theirs = x->seq;
      last_line = x->line;
      if (conflict.ok()) CAPSULE_RETURN_IF_ERROR(out.Add(x->line));
      CAPSULE_RETURN_IF_ERROR(a.Advance(release_ours));
      CAPSULE_RETURN_IF_ERROR(b.Advance(release_theirs));
      continue;
    }
    bool take_ours = y == nullptr || (x != nullptr && LineOrderLess(*x, *y));
    const EventLine& event = take_ours ? *x : *y;
    MachineState& state = machine_state(event.machine);
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
        state.ahead_id.assign(event.id);
        state.ahead_their_position = b.position();
      }
    }
    mine = event.seq;
    last_line = event.line;
    if (!take_ours) {
      // The limit of every writer: an event over it is refused, not merged in.
      CAPSULE_RETURN_IF_ERROR(CheckEventLineSize(event.line.size(), "merge: event " + std::string(event.id) + " (machine " +
                                                                        std::string(event.machine) + ", seq " +
                                                                        std::to_string(event.seq) + ")"));
      ++counts.added;
      if (!out.started() && conflict.ok()) {
        // Everything before this line came from ours, in its order: its text up to here.
        CAPSULE_RETURN_IF_ERROR(output.passed(a.TakePassed()));
        CAPSULE_RETURN_IF_ERROR(output.begin(a.offset()));
        out.Start();
      }
    }
    if (conflict.ok()) CAPSULE_RETURN_IF_ERROR(out.Add(event.line));  // after a conflict, only looking
    CAPSULE_RETURN_IF_ERROR(take_ours ? a.Advance(release_ours) : b.Advance(release_theirs));
  }
  if (!conflict.ok()) return conflict;
  CAPSULE_RETURN_IF_ERROR(out.Flush());
  counts.total = a.position() + counts.added;
  counts.tail = a.tail();
  for (const auto& [machine, tail] : b.tail().machines) {
    MachineTail& merged = counts.tail.machines[machine];
    if (tail.seq > merged.seq) merged = tail;
  }
  counts.tail.max_clock = std::max(a.tail().max_clock, b.tail().max_clock);
  counts.last_line.assign(last_line);
  return counts;
}

Result<MergeCounts> MergeSides(const MergeSide& ours, const MergeSide& theirs,
                               const std::function<Status(std::string_view)>& write) {
  WholeCursor a(ours), b(theirs);
  MergeOutput output{[](std::string_view) { return Status::Ok(); },
                     [&](uint64_t bytes) { return write(ours.text.substr(0, bytes)); }, write,
                     [] { return Status::Ok(); }};
  return MergeSides(a, b, output);
}

}  // namespace capsule::journal
