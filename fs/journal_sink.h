// The hook through which the journal (memory/timeline_events.jsonl) takes appends.
//
// The mount plugs in a JournalSink (fs/journal_append.h) that checks complete lines, fills in
// the chain fields and appends them durably. Until one is plugged in
// (CapsuleFs::SetJournalSink), the journal is read-only in the mount: opening it for writing
// answers EPERM. A write anywhere but the end is refused (EPERM). A write(2) is taken whole
// or not at all: every line it completes goes to the sink in one call, which appends them all
// or refuses them all.
//
// A line written in pieces waits for its newline as the journal's UnfinishedLine, shared by
// every open of the journal, as a regular file's last line is: the next write continues it,
// through the same handle or another (`printf '{...' >> journal; echo '...}' >> journal`). A
// write is refused at once (EINVAL) when the unfinished line it leaves could not begin a JSON
// object (checked from where the last write left off: only a write's new bytes are read),
// and (EFBIG) when it leaves a line longer than journal::kMaxEventLineBytes, finished
// or not: that line is dropped whole, since no later write could make it an event.
//
// Thread-safety: LineAssembler is guarded by its owner (one per open journal handle); the
// UnfinishedLine by its mutex, held for a whole write (so writes through several handles
// are taken one at a time).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/status.h"
#include "fs/document_writes.h"

namespace capsule::fs {

// Takes the complete lines of one write (without their newlines), all or none;
// InvalidArgument refuses them (EINVAL).
using JournalSink = std::function<Status(const std::vector<std::string>& lines)>;

// The journal's last line, written since its last newline and waiting for it.
class UnfinishedLine {
 public:
  size_t size() const {
    std::lock_guard lock(mu_);
    return bytes_.size();
  }
  // The bytes waiting, which are the journal's no longer (the mount stops).
  std::string Take() {
    std::lock_guard lock(mu_);
    std::string taken;
    taken.swap(bytes_);
    prefix_ = JsonPrefix(/*object=*/true);
    return taken;
  }

 private:
  friend class LineAssembler;
  mutable Mutex mu_;
  std::string bytes_ GUARDED_BY(mu_);
  JsonPrefix prefix_ GUARDED_BY(mu_){/*object=*/true};  // bytes_ read so far
};

class LineAssembler {
 public:
  // `end` is the journal's size when the handle was opened. A handle opened with O_APPEND
  // (`append`) always writes at the end, whatever offset the kernel names: the kernel's idea of
  // the size lags, since each line is stored in its canonical, longer form.
  LineAssembler(JournalSink sink, std::shared_ptr<UnfinishedLine> unfinished, uint64_t end, bool append = false)
      : sink_(std::move(sink)), unfinished_(std::move(unfinished)), end_(end), append_(append) {}
  // Takes `data` written at `offset`; hands the lines it completes to the sink at once. When
  // the sink refuses them, or the write is refused before (see above), nothing of this write
  // is kept: the journal and its unfinished line are as they were before it, and the next
  // write is expected where this one began.
  Status Write(uint64_t offset, std::string_view data);

 private:
  JournalSink sink_;
  std::shared_ptr<UnfinishedLine> unfinished_;
  uint64_t end_;          // the offset the next write must start at
  bool append_;           // O_APPEND: every write goes to the end
};

}  // namespace capsule::fs
