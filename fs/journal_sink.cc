#include "fs/journal_sink.h"

#include <cerrno>

#include "fs/document_writes.h"
#include "fs/errno_map.h"
#include "journal/event.h"

namespace capsule::fs {
namespace {

constexpr char kJournal[] = "memory/timeline_events.jsonl";

Status TooLong(uint64_t bytes) {
  return FsError(EFBIG, std::string(kJournal) + ": a line of " + std::to_string(bytes) + " bytes or more; an event is at most " +
                            std::to_string(journal::kMaxEventLineBytes) +
                            " bytes (larger content belongs in an attachment); the line is not kept");
}

}  // namespace

Status LineAssembler::Write(uint64_t offset, std::string_view data) {
  if (!append_ && offset != end_) return FsError(EPERM, std::string(kJournal) + ": only appends at the end");
  std::lock_guard lock(unfinished_->mu_);
  std::string& unfinished = unfinished_->bytes_;
  size_t newline = data.find('\n');
  if (newline == std::string_view::npos) {
    // Nothing finished: the line grows, within the limit, while it can still be an object.
    if (unfinished.size() + data.size() > journal::kMaxEventLineBytes) {
      uint64_t bytes = unfinished.size() + data.size();
      unfinished.clear();
      unfinished.shrink_to_fit();
      unfinished_->prefix_ = JsonPrefix(/*object=*/true);
      return TooLong(bytes);
    }
    JsonPrefix prefix = unfinished_->prefix_;  // the bytes before this write, already read
    if (!prefix.Add(data)) {
      return FsError(EINVAL, std::string(kJournal) + ": a line must be a JSON object, and no later write could make this "
                                                     "one so; this write was not kept");
    }
    unfinished.append(data);
    unfinished_->prefix_ = prefix;
    end_ += data.size();
    return Status::Ok();
  }
  // Every line this write finishes, and what it leaves unfinished, checked before any is taken.
  std::vector<std::string> lines;
  std::string_view rest = data;
  bool first = true;
  for (size_t at; (at = rest.find('\n')) != std::string_view::npos;) {
    uint64_t length = (first ? unfinished.size() : 0) + at;
    if (length > journal::kMaxEventLineBytes) {
      if (first) {  // that line is over the limit whatever comes: dropped
        unfinished.clear();
        unfinished_->prefix_ = JsonPrefix(/*object=*/true);
      }
      return TooLong(length);
    }
    std::string line = first ? unfinished : std::string();
    line.append(rest.substr(0, at));
    lines.push_back(std::move(line));
    first = false;
    rest.remove_prefix(at + 1);
  }
  if (rest.size() > journal::kMaxEventLineBytes) return TooLong(rest.size());
  JsonPrefix prefix(/*object=*/true);
  if (!prefix.Add(rest)) {
    return FsError(EINVAL, std::string(kJournal) + ": the unfinished line after the last newline could not become a "
                                                   "JSON object; this write was not kept");
  }
  Status taken = sink_(lines);
  if (!taken.ok()) return taken;  // nothing of this write kept: as if it never came
  unfinished.assign(rest);
  unfinished_->prefix_ = prefix;
  end_ += data.size();
  return Status::Ok();
}

}  // namespace capsule::fs
