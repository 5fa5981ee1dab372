// The hook through which the journal (memory/timeline_events.jsonl) takes appends.
//
// The mount plugs in a JournalSink (fs/journal_append.h) that checks complete lines, fills in
// the chain fields and appends them durably. Until one is plugged in
// (CapsuleFs::SetJournalSink), the journal is read-only in the mount: opening it for writing
// answers EPERM. A line written in several pieces is buffered by LineAssembler until its
// newline arrives; a write anywhere but the end is refused (EPERM). A write(2) is taken whole
// or not at all: every line it completes goes to the sink in one call, which appends them all
// or refuses them all.
//
// Thread-safety: LineAssembler is guarded by its owner (one per open journal handle).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::fs {

// Takes the complete lines of one write (without their newlines), all or none;
// InvalidArgument refuses them (EINVAL).
using JournalSink = std::function<Status(const std::vector<std::string>& lines)>;

class LineAssembler {
 public:
  // `end` is the journal's size when the handle was opened. A handle opened with O_APPEND
  // (`append`) always writes at the end, whatever offset the kernel names: the kernel's idea of
  // the size lags, since each line is stored in its canonical, longer form.
  LineAssembler(JournalSink sink, uint64_t end, bool append = false)
      : sink_(std::move(sink)), end_(end), append_(append) {}
  // Takes `data` written at `offset`; hands the lines it completes to the sink at once. When
  // the sink refuses them, nothing of this write is kept: the assembler is as it was before
  // it, and the next write is expected where this one began.
  Status Write(uint64_t offset, std::string_view data);
  // True when a partial line is waiting for its newline.
  bool pending() const { return !partial_.empty(); }

 private:
  JournalSink sink_;
  uint64_t end_;          // the offset the next write must start at
  bool append_;           // O_APPEND: every write goes to the end
  std::string partial_;   // bytes of an unfinished line
};

}  // namespace capsule::fs
