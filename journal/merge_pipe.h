// A side of a streaming merge: a journal read and checked a block at a time (BlockCheck) on a
// thread of its own, a few blocks ahead of the merge, which walks its lines as a MergeCursor.
// The merge holds one block of each side at a time, so it needs a few megabytes whatever the
// journals' size, and the two sides are checked at once on two threads. The history both
// journals begin with byte for byte (most of two copies' journals) is read and checked once:
// ours' side compares what it reads with theirs, and theirs starts where they differ.
//
// A fault in the side (a bad line, a broken chain) or an error reading it stops the merge;
// the fault is then named by the merge of the texts read whole (CheckMergeSides), whose
// messages say which journal and which line.
//
// Thread-safety: one caller thread; the reading thread is internal.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "capsule/base/mutex.h"
#include "journal/block_check.h"
#include "journal/merge_stream.h"

namespace capsule::journal {

// Where the whole lines two journals begin with byte for byte end, and what checking them
// established: found by the side that reads ours (comparing as it reads), awaited by the side
// that reads theirs, which starts there. Those lines are read and checked once, for both.
class CommonLines {
 public:
  // The first call counts; an error (ours failed, or stopped) leaves theirs unread.
  void Publish(Result<JournalPosition> end);
  Result<JournalPosition> Wait();
  // Where they end once published (none before): ours' lines before it are theirs too.
  uint64_t end() const { return end_.load(std::memory_order_acquire); }

 private:
  Mutex mu_;
  std::condition_variable published_;
  std::optional<Result<JournalPosition>> position_ GUARDED_BY(mu_);
  std::atomic<uint64_t> end_{std::numeric_limits<uint64_t>::max()};
};

class StreamedSide final : public MergeCursor {
 public:
  // Which of a merge's two sides this is, when they share the lines they begin with.
  enum class Role { kAlone, kOurs, kTheirs };
  // Starts reading `read` from its start, `block` bytes at a time, up to `blocks` blocks
  // (at least two) ahead. As kOurs it compares what it reads with `other` (theirs) and
  // publishes in `common` where the lines both begin with end; as kTheirs it waits for that
  // and reads from there.
  StreamedSide(ReadAtFunction read, size_t block, size_t blocks, Role role = Role::kAlone,
               std::shared_ptr<CommonLines> common = nullptr, ReadAtFunction other = nullptr);
  // Stops the reading thread (it finishes the block in hand).
  ~StreamedSide() override;
  StreamedSide(const StreamedSide&) = delete;
  StreamedSide& operator=(const StreamedSide&) = delete;

  Status Ready() override;
  bool Shares(uint64_t offset) const override { return role_ == Role::kTheirs && offset < common_->end(); }
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

  Role role_;
  std::shared_ptr<CommonLines> common_;
  std::optional<BlockCheck> check_;  // the reading thread's (made by it, as kTheirs)
  ReadAtFunction read_;
  size_t block_size_;
  uint64_t first_line_ GUARDED_BY(mu_) = 1;  // the journal's line number of the first line given
  std::vector<std::unique_ptr<CheckedBlock>> blocks_;

  Mutex mu_;
  std::condition_variable changed_;
  std::deque<CheckedBlock*> ready_ GUARDED_BY(mu_);  // read, in order, for the merge
  std::deque<CheckedBlock*> free_ GUARDED_BY(mu_);  // for the reading thread to fill
  bool done_ GUARDED_BY(mu_) = false;  // the reading thread put its last block
  bool stop_ GUARDED_BY(mu_) = false;
  Status fault_ GUARDED_BY(mu_);  // why reading stopped early
  JournalPosition end_;              // where the side ends; written before done_, read after it
  std::thread thread_;

  // The caller's.
  bool opened_ = false;
  CheckedBlock* current_ = nullptr;
  size_t part_ = 0, index_ = 0;
  const EventLine* head_ = nullptr;
  size_t mark_ = 0;  // where in the block's text the last TakePassed ended
  bool failed_ = false;
};

}  // namespace capsule::journal
