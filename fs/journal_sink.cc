#include "fs/journal_sink.h"

#include <cerrno>

#include "fs/errno_map.h"

namespace capsule::fs {

Status LineAssembler::Write(uint64_t offset, std::string_view data) {
  if (!append_ && offset != end_) return FsError(EPERM, "memory/timeline_events.jsonl: only appends at the end");
  end_ += data.size();
  while (!data.empty()) {
    size_t newline = data.find('\n');
    if (newline == std::string_view::npos) {
      partial_.append(data);
      break;
    }
    partial_.append(data.substr(0, newline));
    data.remove_prefix(newline + 1);
    std::string line = std::move(partial_);
    partial_.clear();
    Status taken = sink_(line);
    if (!taken.ok()) return taken;
  }
  return Status::Ok();
}

}  // namespace capsule::fs
