#include "fs/journal_sink.h"

#include <cerrno>

#include "fs/errno_map.h"

namespace capsule::fs {

Status LineAssembler::Write(uint64_t offset, std::string_view data) {
  if (!append_ && offset != end_) return FsError(EPERM, "memory/timeline_events.jsonl: only appends at the end");
  std::vector<std::string> lines;
  std::string partial = partial_;
  std::string_view rest = data;
  for (size_t newline; (newline = rest.find('\n')) != std::string_view::npos;) {
    partial.append(rest.substr(0, newline));
    lines.push_back(std::move(partial));
    partial.clear();
    rest.remove_prefix(newline + 1);
  }
  partial.append(rest);
  if (!lines.empty()) {
    Status taken = sink_(lines);
    if (!taken.ok()) return taken;  // nothing of this write kept: as if it never came
  }
  partial_ = std::move(partial);
  end_ += data.size();
  return Status::Ok();
}

}  // namespace capsule::fs
