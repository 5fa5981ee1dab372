// Reading a journal's text line by line with the fast reader (event_line.h), on a few threads,
// and checking the chains, clocks and order of what was read: the pieces check.h, merge and
// the writers build on (internal to journal/).
//
// Thread-safety: ScanLines runs its own threads and returns when they are done; a ChainCheck
// is used by one thread.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"
#include "journal/check.h"
#include "journal/event_line.h"

namespace capsule::journal {

// Every complete line of a text, read in order. Fields are views into the text, or into
// `slow`: the few events the fast reader left to ParseEventLine.
struct ScannedPart {
  std::vector<EventLine> lines;
  std::deque<Event> slow;
};
struct ScannedLines {
  std::vector<ScannedPart> parts;  // in the text's order
  size_t size() const;
  // The last line; nullptr when there is none.
  const EventLine* last() const;
  template <typename F>
  void ForEach(F&& f) const {
    for (const ScannedPart& part : parts) {
      for (const EventLine& line : part.lines) f(line);
    }
  }
};

// Reads the complete lines of `text` (a torn last line is left out), the first being line
// `first_line` of the journal, on up to `threads` threads. The first bad line is Corruption as
// ParseEventLine names it ("journal: line 12: ...").
Result<ScannedLines> ScanLines(std::string_view text, uint64_t first_line, unsigned threads);

// The threads worth using for a text of `bytes`: one per few megabytes, at most one per core
// and at most four.
unsigned ScanThreads(size_t bytes);

// Checks events one after another as lines of one journal, as CheckEvents does, with the same
// messages: each machine's chain (seq, prev), its clocks, the order. A repeated event fails
// the order or the chain; CheckChains names it a duplicate, as CheckEvents does.
class ChainCheck {
 public:
  // Continues a journal whose machines end as `tail` says and whose last event is `last`
  // (none for an empty journal). `tail` is updated as events pass.
  ChainCheck(JournalTail* tail, std::optional<EventLine> last) : tail_(tail), previous_(last) {}

  // Ok when `event` may follow the events this ChainCheck was given.
  Status Next(const EventLine& event);

  const std::optional<EventLine>& last() const { return previous_; }

 private:
  JournalTail* tail_;
  std::optional<EventLine> previous_;
};

// Checks every line of `lines` in order as continuing a journal whose machines end as `tail`
// says, after `last`: the first fault as CheckEvents names it.
Status CheckChains(const ScannedLines& lines, JournalTail* tail, std::optional<EventLine> last);
// The same when `lines` follow `earlier`, lines of the same journal already checked (whose
// chains left `tail` and `last`): a line that repeats one of `earlier` is named a duplicate.
Status CheckChainsAfter(const ScannedLines& earlier, const ScannedLines& lines, JournalTail* tail,
                        std::optional<EventLine> last);

}  // namespace capsule::journal
