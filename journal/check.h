// Reading and checking a journal's text: split it into lines, parse each event, and check
// the whole: every id, every machine's chain, clocks, the file's order, no duplicates.
//
// The rules (man/capsule.5, "The journal"):
//   - each line is one event in canonical form whose id matches its content;
//   - each machine's events have seq 1, 2, 3 ... without gaps, and prev is the id of the same
//     machine's previous event (null for seq 1);
//   - a machine's clocks strictly increase along its chain;
//   - the lines are in strictly increasing (clock, machine, seq) order, so no event repeats.
// A last line without its newline is a torn append (a crash mid-write): it was never
// acknowledged, is not an event, and is left out here; writers cut it off (journal.h).
//
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/status.h"
#include "journal/event.h"
#include "journal/event_line.h"

namespace capsule::journal {

// The length of `text` without a torn last line: up to and including its last newline.
size_t CompleteLength(std::string_view text);

// Parses every complete line of `text` in file order; the first bad line is Corruption
// naming its line number. Chains and order are not checked here.
Result<std::vector<Event>> ParseJournalText(std::string_view text);

// Checks chains, clocks, order and duplicates of events given in file order. Corruption
// naming the first bad event and why, e.g.
//   "journal: event <id> (machine m1, seq 7): prev does not link to seq 6".
Status CheckEvents(const std::vector<Event>& events);

// ParseJournalText then CheckEvents.
Result<std::vector<Event>> ReadJournalText(std::string_view text);

// ReadJournalText without building the events: ok, or the first fault, the same.
Status VerifyJournalText(std::string_view text);

// VerifyJournalText of the bytes `read` gives, read `block` bytes at a time into one buffer
// (a journal of any size is checked in a few megabytes, near the speed of reading it). A
// fault found on the way is named exactly as VerifyJournalText names it: the journal is then
// read again whole and checked that way.
Status VerifyJournalAt(const ReadAtFunction& read, size_t block = 8 << 20);

// The hook for `capsule verify` (VerifyOptions::check_journal): one line per problem,
// empty when the journal is sound. Reports the first fault only.
std::vector<std::string> CheckJournalAt(const ReadAtFunction& read);
// The same for a journal's text in memory.
std::vector<std::string> CheckJournalText(std::string_view text);

// What an appender needs to know of a journal: each machine's last event and the largest
// clock seen.
struct MachineTail {
  uint64_t seq = 0;
  std::string id;
  uint64_t clock = 0;
};
struct JournalTail {
  uint64_t max_clock = 0;
  std::map<std::string, MachineTail, std::less<>> machines;
  void Add(const Event& event);
  void Add(const EventLine& event);
};

// Where a check a block at a time starts: the offset of the first line to read (after a
// newline), its line number, and what the lines before it established (nothing for a whole
// journal): each machine's last event and the last line's event (its data may be left null:
// the check of the next line does not look at it).
struct JournalPosition {
  uint64_t offset = 0;
  uint64_t next_line = 1;
  JournalTail tail;
  std::optional<Event> last;
};
// Checks the complete lines `read` gives after `from.offset`, `block` bytes at a time, as
// continuing `from`; where they end. A fault is named as the check of the lines read so far
// finds it (VerifyJournalAt names it as the whole text's check does).
Result<JournalPosition> ContinueJournalAt(const ReadAtFunction& read, JournalPosition from, size_t block = 8 << 20);

// What a check of a journal's complete lines established, so that the same journal grown by
// appends can later be checked by its new lines alone (a move's switch after its copy).
struct CheckedJournal {
  uint64_t size = 0;          // bytes of complete lines covered
  std::string sha256;         // of those bytes
  uint64_t lines = 0;
  JournalTail tail;           // each machine's last event, the largest clock
  std::optional<Event> last;  // the last line's event, without its data: the next must come after it
  // The SHA-256 of those bytes as it stood after them, so that the digest of the journal grown
  // by appends is found from the new bytes alone (never changed once made: continue a copy).
  std::shared_ptr<const Sha256> hasher;
};

// Called with each line a check reads, in file order, once the line is checked (its views
// live only during the call): what a caller gathers of the events without holding them all.
// An error stops the check and is its result.
using LineVisitor = std::function<Status(const EventLine&)>;

// Checks `text` whole, as ReadJournalText does (a fault in a text of more than 8 MiB is the
// first the lines read so far show, as CheckJournalGrowthAt finds it), and returns what the
// check established; each line goes to `visit` when given.
Result<CheckedJournal> CheckJournal(std::string_view text, const LineVisitor& visit = nullptr);

// Checks `text` knowing `from`: when `text` starts with the bytes `from` covers (same length
// and SHA-256), only the lines after them are read and checked, as continuing `from`;
// otherwise (the journal was merged or replaced) the whole text is checked. `visit` gets the
// lines that were checked (the new ones, or all).
Result<CheckedJournal> CheckJournalGrowth(const CheckedJournal& from, std::string_view text,
                                          const LineVisitor& visit = nullptr);

// Checks `appended`, the bytes that follow the ones `from` covers in a journal known to begin
// with them, as continuing `from`: only those bytes are read (`from.hasher` continues the
// digest; FailedPrecondition when `from` has none). `visit` gets the new lines.
Result<CheckedJournal> CheckJournalAppended(const CheckedJournal& from, std::string_view appended,
                                            const LineVisitor& visit = nullptr);

// The same three of the journal `read` gives, read `block` bytes at a time into one buffer:
// a journal of any size is checked in a few megabytes. A fault is the first the check of the
// lines read so far finds. CheckJournalAppendedAt reads the whole journal's bytes after
// `from.size`.
Result<CheckedJournal> CheckJournalGrowthAt(const CheckedJournal& from, const ReadAtFunction& read,
                                            const LineVisitor& visit = nullptr, size_t block = 8 << 20);
Result<CheckedJournal> CheckJournalAppendedAt(const CheckedJournal& from, const ReadAtFunction& read,
                                              const LineVisitor& visit = nullptr, size_t block = 8 << 20);

}  // namespace capsule::journal
