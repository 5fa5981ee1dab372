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
// Thread-safety: pure functions over texts the caller keeps alive; internal to journal/.
#pragma once

#include <functional>
#include <string_view>

#include "capsule/base/status.h"
#include "journal/check.h"
#include "journal/scan.h"

namespace capsule::journal {

// One side of a merge: a journal's complete lines, read and checked as ReadJournalText
// checks them (the same faults), and how its machines end.
struct MergeSide {
  std::string_view text;  // complete lines only
  ScannedLines lines;
  JournalTail tail;
};
Result<MergeSide> CheckMergeSide(std::string_view text);

struct MergeCounts {
  size_t added = 0;          // events of theirs that ours lacked
  size_t total = 0;          // events in the merged journal
  JournalTail tail;          // each machine's last event in the merged journal
  std::string_view last_line;  // the merged journal's last line, without its newline
};

// Merges `theirs` into `ours`. `write` receives the merged text in order, in pieces; it is
// called only when at least one event is added (otherwise the merge changes nothing). A
// conflict is Corruption as EventsToAdd names it: the first of theirs, in their order.
Result<MergeCounts> MergeSides(const MergeSide& ours, const MergeSide& theirs,
                               const std::function<Status(std::string_view)>& write);

}  // namespace capsule::journal
