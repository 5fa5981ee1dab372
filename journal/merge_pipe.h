// A side of a streaming merge: a journal read and checked a block at a time (BlockCheck) on a
// thread of its own, a few blocks ahead of the merge, which walks its lines as a MergeCursor.
// The merge holds one block of each side at a time, so it needs a few megabytes whatever the
// journals' size, and the two sides are checked at once on two threads.
//
// A fault in the side (a bad line, a broken chain) or an error reading it stops the merge;
// the fault is then named by the merge of the texts read whole (CheckMergeSides), whose
// messages say which journal and which line.
//
// Thread-safety: one caller thread; the reading thread is internal.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "journal/block_check.h"
#include "journal/merge_stream.h"

namespace capsule::journal {

class StreamedSide final : public MergeCursor {
 public:
  // Starts reading `read` from its start, `block` bytes at a time, up to `blocks` blocks
  // (at least two) ahead.
  StreamedSide(ReadAtFunction read, size_t block, size_t blocks);
  // Stops the reading thread (it finishes the block in hand).
  ~StreamedSide() override;
  StreamedSide(const StreamedSide&) = delete;
  StreamedSide& operator=(const StreamedSide&) = delete;

  // Waits for the first block. Must be called before anything else.
  Status Open();

  const EventLine* head() const override { return head_; }
  Status Advance(const std::function<Status()>& before_release) override;
  uint64_t offset() const override;
  const JournalTail& tail() const override { return end_.tail; }
  std::string_view TakePassed() override;

  // True when reading stopped at a fault or an error of the side (its status returned by
  // Open or Advance).
  bool failed() const { return failed_; }

 private:
  void Read();  // the reading thread
  // The next block read, or nullptr at the end; a fault or error of the side.
  Result<CheckedBlock*> Take();
  void Settle();  // head_ at the current position, moving on within the block
  Status NextBlock();

  BlockCheck check_;  // the reading thread's
  std::vector<std::unique_ptr<CheckedBlock>> blocks_;

  std::mutex mu_;
  std::condition_variable changed_;
  std::deque<CheckedBlock*> ready_;  // guarded by mu_: read, in order, for the merge
  std::deque<CheckedBlock*> free_;   // guarded by mu_: for the reading thread to fill
  bool done_ = false;                // guarded by mu_: the reading thread put its last block
  bool stop_ = false;                // guarded by mu_
  Status fault_;                     // guarded by mu_: why reading stopped early
  JournalPosition end_;              // where the side ends; written before done_, read after it
  std::thread thread_;

  // The caller's.
  CheckedBlock* current_ = nullptr;
  size_t part_ = 0, index_ = 0;
  const EventLine* head_ = nullptr;
  size_t mark_ = 0;  // where in the block's text the last TakePassed ended
  bool failed_ = false;
};

}  // namespace capsule::journal
