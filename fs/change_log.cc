#include "fs/change_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "capsule/base/canonical_json.h"

namespace capsule::fs {
namespace {

void EraseSubtree(WorkspaceTimes* times, const std::string& path) {
  times->erase(path);
  std::string prefix = path + "/";
  for (auto it = times->lower_bound(prefix); it != times->end() && it->first.rfind(prefix, 0) == 0;) {
    it = times->erase(it);
  }
}

}  // namespace

Result<std::string> ChangeToLine(const WorkspaceChange& change) {
  // Canonical form, written part by part: the keys in byte order ("del" < "set" < "times"),
  // each value in its own canonical text. The sets are a snapshot's entries, written by the
  // snapshot's own writer; one line is written for every change to the workspace, so no Json
  // is built for it.
  CanonicalWriter del;
  del.Raw("{\"del\":[");
  for (size_t i = 0; i < change.del.size(); ++i) {
    if (i != 0) del.Raw(",");
    del.String(change.del[i]);
  }
  del.Raw("],\"set\":");
  std::string line;
  if (del.ok()) {
    line = del.Take();
  } else {  // a path that needs escaping
    CAPSULE_ASSIGN_OR_RETURN(std::string array, CanonicalJson(Json(change.del), "workspace.log"));
    line = "{\"del\":" + array + ",\"set\":";
  }
  Snapshot sets;
  for (const auto& [path, entry] : change.set) sets.Set(path, entry);
  CAPSULE_ASSIGN_OR_RETURN(std::string set_text, sets.ToCanonicalText());
  line += set_text;
  if (!change.times.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string times_text, WorkspaceTimesText(change.times));
    line += ",\"times\":";
    line += times_text;
  }
  line += "}\n";
  return line;
}

Result<size_t> ReplayChanges(std::string_view text, Snapshot* snapshot,
                             const std::function<bool(const SnapshotEntry&)>& blob_ok,
                             WorkspaceTimes* times) {
  size_t applied = 0;
  while (!text.empty()) {
    size_t newline = text.find('\n');
    if (newline == std::string_view::npos) break;  // torn last line: never acknowledged
    std::string_view line = text.substr(0, newline);
    text.remove_prefix(newline + 1);
    Result<Json> json = ParseJson(line, "workspace.log", Code::kCorruption);
    if (!json.ok() || !json->is_object() || !(*json)["del"].is_array() || !(*json)["set"].is_object()) break;
    Result<std::string> sets = CanonicalJson((*json)["set"], "workspace.log");
    Result<Snapshot> parsed = sets.ok() ? Snapshot::Parse(*sets) : Result<Snapshot>(sets.status());
    if (!parsed.ok()) break;
    bool whole = true;
    for (const auto& [path, entry] : parsed->entries()) {
      if (entry.type == SnapshotEntry::Type::kFile && blob_ok && !blob_ok(entry)) whole = false;
    }
    if (!whole) continue;
    for (const auto& path : (*json)["del"]) {
      if (!path.is_string()) continue;
      snapshot->Remove(path.get<std::string>());
      if (times) EraseSubtree(times, path.get<std::string>());
    }
    for (const auto& [path, entry] : parsed->entries()) snapshot->Set(path, entry);
    if (times && json->contains("times")) ParseWorkspaceTimes((*json)["times"], times);
    ++applied;
  }
  return applied;
}

Result<ChangeLog*> ChangeLog::Open(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600));
  return Open(path, std::move(fd));
}

Result<ChangeLog*> ChangeLog::Open(const std::string& path, UniqueFd fd) {
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::IOError(path, errno);
  return new ChangeLog(path, std::move(fd), static_cast<uint64_t>(st.st_size));
}

Status ChangeLog::Append(const WorkspaceChange& change) {
  CAPSULE_ASSIGN_OR_RETURN(std::string line, ChangeToLine(change));
  std::lock_guard lock(mu_);
  if (!cut_failed_.ok()) return cut_failed_;
  Status written = WriteAll(fd_.get(), line, path_);
  if (written.ok()) {
    size_ += line.size();
    return written;
  }
  if (::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
    cut_failed_ = Status::IOError(path_, "a change written in part could not be cut off (" +
                                             std::string(std::strerror(errno)) +
                                             "): no change is taken until the next checkpoint");
  }
  return written;
}

Status ChangeLog::Sync() {
  if (::fdatasync(fd_.get()) != 0) return Status::IOError(path_, errno);
  return Status::Ok();
}

Status ChangeLog::Truncate() {
  std::lock_guard lock(mu_);
  if (::ftruncate(fd_.get(), 0) != 0) return Status::IOError(path_, errno);
  size_ = 0;  // emptied, whether or not the sync below succeeds
  cut_failed_ = Status::Ok();
  if (::fsync(fd_.get()) != 0) return Status::IOError(path_, errno);
  return Status::Ok();
}

}  // namespace capsule::fs
