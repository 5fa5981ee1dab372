// A folder held open by descriptor, and every file operation beneath it made relative to that
// descriptor without following a link: what keeps a program that runs as root (capsulefs with
// allow_other, the sidecar) inside a capsule folder that someone else may change under it.
//
// The folder is opened once (O_DIRECTORY | O_NOFOLLOW: a link where it belongs is refused);
// each path beneath it is resolved by openat2(2) with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS, so
// a link anywhere on the way, even one put there a moment ago, makes the operation fail
// instead of reaching outside. Renames, removals and new folders are renameat2/unlinkat/mkdirat
// on the descriptor of the folder holding the name, itself reached that way; the last name is
// never followed by those calls. A folder renamed away while held is still the one written
// (the operation lands where the folder went, never where a link points). Needs Linux 5.6.
//
// Errors name the full path (the held folder's path joined with the relative one); a link on
// the way is InvalidArgument "reached through a link; links are never followed".
//
// Thread-safety: a DirFd is immutable once opened; its methods are safe from any thread.
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

class DirFd {
 public:
  DirFd() = default;
  DirFd(DirFd&&) noexcept = default;
  DirFd& operator=(DirFd&&) noexcept = default;
  DirFd(const DirFd&) = delete;
  DirFd& operator=(const DirFd&) = delete;

  // The folder at `path` (links before its last name are the caller's business, as for any
  // path it gives); a link or anything but a folder at `path` itself is refused naming it.
  static Result<DirFd> Open(const std::string& path);
  // The folder a user named: a link at `path` itself is followed, like any path given on a
  // command line; everything beneath it is still reached without a link.
  static Result<DirFd> OpenGiven(const std::string& path);

  // Another descriptor of this very folder (dup(2)), for a holder of its own.
  Result<DirFd> Duplicate() const;
  // The folder `rel` beneath this one, reached without following a link.
  Result<DirFd> OpenDir(const std::string& rel) const;
  // open(2) of `rel` beneath this folder, no link followed anywhere in it (O_NOFOLLOW too, so
  // that a link as the last name is refused even with O_CREAT).
  Result<UniqueFd> OpenFile(const std::string& rel, int flags, mode_t mode = 0) const;
  // `rel` read whole (OpenFile O_RDONLY): a link anywhere in it, the last name too, is refused
  // naming the path, never followed.
  Result<std::string> ReadFile(const std::string& rel) const;
  // The same, and refused past `max` bytes or for anything but a regular file, in
  // ReadFileBounded's words (file_io.h).
  Result<std::string> ReadFileBounded(const std::string& rel, uint64_t max, std::string_view what) const;
  // Every entry beneath `rel` ("" for this folder), as ListTree (file_io.h) lists them, the
  // folder reached without a link.
  Result<std::vector<TreeEntry>> ListTree(const std::string& rel = "", const std::vector<std::string>& skip = {}) const;
  // The names of the regular files directly in `rel`, as ListFileNames (file_io.h) gives them.
  Result<std::vector<std::string>> ListFileNames(const std::string& rel, std::vector<std::string>* others = nullptr) const;
  // lstat(2) of `rel`, reached without following a link before its last name.
  Result<struct stat> Stat(const std::string& rel) const;
  // Creates the folder `rel` (its parent must exist) with `mode` (set with fchmod, not
  // subject to the umask). An existing folder is fine when `exist_ok` (AlreadyExists
  // otherwise); a link or a file there is refused naming it.
  Status MakeDir(const std::string& rel, mode_t mode, bool exist_ok = true) const;
  // renameat2(2) of `from` to `to`, both beneath this folder; `flags` as renameat2's.
  Status Rename(const std::string& from, const std::string& to, unsigned flags = 0) const;
  // unlinkat(2) of `rel` (AT_REMOVEDIR for `folder`); a missing name is an error (NotFound).
  Status Unlink(const std::string& rel, bool folder = false) const;
  // Removes `rel` and everything under it, never following a link (a link is removed, not
  // what it points to); a missing `rel` is fine.
  Status RemoveTree(const std::string& rel) const;
  // fsync(2) of the folder `rel` ("" for this one).
  Status SyncDir(const std::string& rel = "") const;
  // The durable-write path (file_io.h) for `rel`: its temporary file is made beside it, in
  // the folder reached without a link, and renamed over it there.
  Result<AtomicFile> CreateAtomic(const std::string& rel, mode_t mode) const;
  Status WriteFileAtomic(const std::string& rel, std::string_view data, mode_t mode) const;

  int get() const { return fd_.get(); }
  bool valid() const { return fd_.valid(); }
  // The path it was opened by, for messages.
  const std::string& path() const { return path_; }
  std::string PathOf(const std::string& rel) const { return JoinPath(path_, rel); }

 private:
  DirFd(UniqueFd fd, std::string path) : fd_(std::move(fd)), path_(std::move(path)) {}
  // The folder holding `rel`, opened for reading (so it can be synced), and its last name.
  Result<std::pair<UniqueFd, std::string>> Parent(const std::string& rel) const;

  UniqueFd fd_;
  std::string path_;
};

}  // namespace capsule
