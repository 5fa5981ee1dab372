// Reading a journal a block at a time and checking each block's lines as continuing those
// before: the loop behind ContinueJournalAt (check.h) and the streaming merge (merge_pipe.h).
// Internal to journal/.
//
// Thread-safety: a BlockCheck and the blocks it fills are used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "journal/check.h"
#include "journal/scan.h"

namespace capsule::journal {

// A block of a journal's complete lines, read and checked. `lines` are views into `buffer`
// (or into their own parts, for the few events the fast reader leaves to the full parse).
struct CheckedBlock {
  std::string buffer;     // grows to the block size (more for a line longer than a block), never shrinks
  std::string_view text;  // the block's complete lines, at the start of `buffer`
  uint64_t offset = 0;    // where `text` starts in the journal
  ScannedLines lines;
};

class BlockCheck {
 public:
  // Reads after `from` (see JournalPosition), `block` bytes at a time, each block's lines
  // scanned on up to `threads` threads (0: as many as ScanThreads gives).
  BlockCheck(ReadAtFunction read, JournalPosition from, size_t block, unsigned threads = 0);

  // Fills `block` with the next complete lines, checked as continuing those before them;
  // false once no complete line is left (what remains is a torn last line, never an event).
  // A fault is the first the check of the lines read so far finds.
  Result<bool> Next(CheckedBlock* block);

  // Where the lines given so far end, and what they established.
  const JournalPosition& position() const { return position_; }

  // Compares what is read with the same bytes of `other` (another journal) until they
  // differ, and calls `at_end` once with the position where the whole lines both begin with
  // end (CommonLinesLength), checked: a block is cut there, and `at_end` runs before the
  // block after it is given. The lines read before then were checked as scanned on up to
  // ScanThreads threads (the other journal's reader waits for them).
  void CompareWith(ReadAtFunction other, std::function<void(const JournalPosition&)> at_end);

 private:
  // How many of the `size` bytes at `buffer`, read at `offset`, `other_` begins the same
  // bytes there with.
  Result<size_t> EqualBytes(uint64_t offset, const char* buffer, size_t size);
  void EndOfCommon();
  ReadAtFunction read_;
  JournalPosition position_;
  size_t block_;
  unsigned threads_;
  uint64_t read_offset_;  // where the next read starts
  std::string carried_;   // the incomplete line after the last block, read already
  bool ended_ = false;
  ReadAtFunction other_;  // while comparing
  std::function<void(const JournalPosition&)> at_end_of_common_;
  std::string other_buffer_;
};

}  // namespace capsule::journal
