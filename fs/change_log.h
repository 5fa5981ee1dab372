// The workspace change log, .capsule/workspace.log: what makes a commit cost independent of
// the workspace's size. Each change to the workspace is one canonical JSON line,
//   {"del":["<path>",...],"set":{"<path>":<snapshot entry>,...}}
// applied deletes first, then sets; a line may also carry "times":{"<path>":[sec,nsec],...},
// the modification times of the paths it names (local to this machine, like the log: a
// capsule's portable state is content, so times are not exported or moved). Each line states the absolute result for the paths it
// names, so replaying the log over a snapshot that already holds some of its changes gives
// the same state (replay is idempotent). A torn last line (a crash mid-append) is ignored.
//
// snapshot.json and manifest.json are rewritten, and the log emptied, only at a checkpoint:
// mount recovery, freeze and unmount.
//
// Durability: a line is written at each change and made durable (with its blob) only by
// fsync, fsyncdir, freeze and unmount; a crash of the driver loses nothing (the lines are in
// the kernel), a power cut may lose the changes since the last sync, never tearing a file.
//
// Thread-safety: Append and Sync are safe from any thread (mu_ orders the lines); Truncate
// needs the caller to have stopped every writer.
#pragma once

#include <time.h>

#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "capsule/format/workspace.h"
#include "capsule/format/workspace_times.h"

namespace capsule::fs {

using capsule::WorkspaceTimes;

struct WorkspaceChange {
  std::vector<std::string> del;
  std::map<std::string, SnapshotEntry> set;
  WorkspaceTimes times;
  bool empty() const { return del.empty() && set.empty() && times.empty(); }
};

Result<std::string> ChangeToLine(const WorkspaceChange& change);

// Applies the whole lines of `text` to `snapshot`, up to the first line that is not a change
// (a torn tail after a crash); returns how many lines were applied. A line with a file entry
// whose blob `blob_ok` rejects (its content did not reach the disk before a power cut) is
// skipped whole: those paths keep their older state. When `times` is given, the lines' times
// are applied to it too (a deleted path's time goes with it).
Result<size_t> ReplayChanges(std::string_view text, Snapshot* snapshot,
                             const std::function<bool(const SnapshotEntry&)>& blob_ok = nullptr,
                             WorkspaceTimes* times = nullptr);

class ChangeLog {
 public:
  // The log open as `fd` (O_WRONLY | O_APPEND, opened beneath the capsule folder by the caller);
  // `path` names it in messages. Owned by the caller.
  static Result<ChangeLog*> Open(const std::string& path, UniqueFd fd);
  // The same, opened by its path (tools and tests; the mount opens it beneath its folder).
  static Result<ChangeLog*> Open(const std::string& path);
  // Writes the line (not yet durable); lines reach the file in call order. A line written in
  // part (a full disk) is cut off again, so that the next line starts a line of its own (replay
  // stops at the first line that is not a change); should the cut fail, every later append is
  // refused until Truncate.
  Status Append(const WorkspaceChange& change);
  // fdatasync: every line appended before the call is durable on return.
  Status Sync();
  // Empties the log durably.
  Status Truncate();

 private:
  ChangeLog(std::string path, UniqueFd fd, uint64_t size)
      : path_(std::move(path)), fd_(std::move(fd)), size_(size) {}
  const std::string path_;
  Mutex mu_;
  UniqueFd fd_;       // O_APPEND; writes guarded by mu_
  uint64_t size_;     // the whole lines' length; guarded by mu_
  Status cut_failed_ GUARDED_BY(mu_);
};

}  // namespace capsule::fs
