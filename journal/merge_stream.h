// Merging two journals in one pass over each, like sort -m: both are sorted by (clock,
// machine, seq), so the union by id comes out in order by taking the smaller head each time.
// Lines are copied byte for byte (a checked line is the canonical line of its event), and an
// event both sides hold is written once. The rules are Journal::MergeFrom's (journal.h).
//
// A conflict (the same machine and seq with different ids) is found as the merge passes it:
// along one machine's chain the two sides agree up to some seq and differ from there on (each
// id digests its predecessor's), so the first event of that machine taken from one side alone
// is remembered until the other side reaches the same seq.
//
// Thread-safety: functions of their arguments, run on the caller's thread (a streamed side
// reads on a thread of its own); texts given whole are kept alive by the caller. Internal to
// journal/.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "capsule/base/status.h"
#include "journal/check.h"
#include "journal/scan.h"

namespace capsule::journal {

// One side of a merge: a journal's complete lines, read and checked as ReadJournalText
// checks them (the same faults), and how its machines end. The lines it begins with byte for
// byte as the other side does are read and checked once for both sides, and shared.
struct MergeSide {
  std::string_view text;                        // complete lines only
  std::shared_ptr<const ScannedLines> common;   // the lines both sides begin with (views into ours)
  ScannedLines own;                             // the lines after them
  JournalTail tail;
  size_t size() const { return common->size() + own.size(); }
};
struct MergeInput {
  MergeSide ours, theirs;
};
// Reads and checks both sides. A fault is named as ReadJournalText names the first fault of
// `ours`, else of `theirs`, with `ours_name` or `theirs_name` before it ("merge: this
// journal: journal: line 12: ..."); a fault in the lines both begin with is ours.
Result<MergeInput> CheckMergeSides(std::string_view ours, std::string_view theirs, const std::string& ours_name,
                                   const std::string& theirs_name);

// The length of the longest run of whole lines (each with its newline) that `a` and `b` both
// begin with.
size_t CommonLinesLength(std::string_view a, std::string_view b);

struct MergeCounts {
  size_t added = 0;          // events of theirs that ours lacked
  size_t total = 0;          // events in the merged journal
  JournalTail tail;          // each machine's last event in the merged journal
  std::string last_line;     // the merged journal's last line, without its newline
};

// One side's lines in order, as MergeSides walks them: a text read whole (MergeSide), or a
// journal read a block at a time (StreamedSide, merge_pipe.h).
class MergeCursor {
 public:
  virtual ~MergeCursor() = default;
  // Makes head() valid; called before it (and may wait for the side's first lines).
  virtual Status Ready() { return Status::Ok(); }
  // For theirs: true when ours' line at `offset` is one of the lines both sides begin with,
  // which this side does not give (it starts after them).
  virtual bool Shares(uint64_t offset) const {
    (void)offset;
    return false;
  }
  // The line at the head; nullptr once none is left.
  virtual const EventLine* head() const = 0;
  // Moves past the head. `before_release` runs first when the lines passed so far are about
  // to stop being valid (a block is reused); its error, or one in reading on, is returned.
  virtual Status Advance(const std::function<Status()>& before_release) = 0;
  // Where the head starts in the side's text; the length of its complete lines at the end.
  virtual uint64_t offset() const = 0;
  // Each machine's last event in the side; whole once none is left.
  virtual const JournalTail& tail() const = 0;
  // The side's text from where the last call ended (its start) to the head, or to the end of
  // the block being released when called from `before_release`.
  virtual std::string_view TakePassed() = 0;
  // Lines passed so far.
  size_t position() const { return position_; }

 protected:
  size_t position_ = 0;
};

// Where the merged text goes.
struct MergeOutput {
  // Ours' text as the merge passes it, in order, until the first event of theirs is added
  // (whether or not one is): for a digest of the merged text, which begins with it. Views
  // valid until `settle` is next called.
  std::function<Status(std::string_view)> passed;
  // Called once, when the first event of theirs is added (never when none is): the merged
  // text begins with the first `bytes` of ours, the text given to `passed`.
  std::function<Status(uint64_t bytes)> begin;
  // The rest of the merged text, in order, in pieces: views into the sides' text, valid
  // until `settle` is next called or the merge returns.
  std::function<Status(std::string_view)> write;
  // Called before the pieces given so far stop being valid: be done with them.
  std::function<Status()> settle;
};

// Merges `theirs` into `ours`. A conflict (the same machine and seq with different ids) is
// Corruption as EventsToAdd names it: the first of theirs, in their order; nothing is
// written after it. A cursor's error stops the merge and is returned.
Result<MergeCounts> MergeSides(MergeCursor& ours, MergeCursor& theirs, const MergeOutput& output);

// The same for sides read whole: `write` receives the whole merged text in pieces, and is
// called only when at least one event is added.
Result<MergeCounts> MergeSides(const MergeSide& ours, const MergeSide& theirs,
                               const std::function<Status(std::string_view)>& write);

}  // namespace capsule::journal
