// The hook through which the journal (memory/timeline_events.jsonl) takes appends.
//
// The journal library (another module) will provide a JournalSink that checks one complete
// line, fills in the chain fields and appends it durably. Until one is plugged in
// (CapsuleFs::SetJournalSink), the journal is read-only in the mount: opening it for writing
// answers EPERM. A line written in several pieces is buffered by LineAssembler until its
// newline arrives; a write anywhere but the end is refused (EPERM).
//
// Thread-safety: LineAssembler is guarded by its owner (one per open journal handle).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule::fs {

// Takes one complete line (without its newline); InvalidArgument refuses it (EINVAL).
using JournalSink = std::function<Status(std::string_view line)>;

class LineAssembler {
 public:
  // `end` is the journal's size when the handle was opened. A handle opened with O_APPEND
  // (`append`) always writes at the end, whatever offset the kernel names: the kernel's idea of
  // the size lags, since each line is stored in its canonical, longer form.
  LineAssembler(JournalSink sink, uint64_t end, bool append = false)
      : sink_(std::move(sink)), end_(end), append_(append) {}
  // Takes `data` written at `offset`; hands every completed line to the sink. A refused line
  // drops the whole line (nothing of it is kept).
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
