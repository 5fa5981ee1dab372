#include "capsule/format/copy.h"

#include <fcntl.h>
#include <unistd.h>

#include <string_view>
#include <vector>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"

namespace capsule {

namespace {

// The file `rel` of the held capsule folder `from`, read beneath it (never through a link),
// written beneath `to` by the durable-write path (a link in its place is replaced, not followed).
Status CopyFile(const DirFd& from, const std::string& rel, const DirFd& to) {
  CAPSULE_ASSIGN_OR_RETURN(std::string data, from.ReadFile(rel));
  return to.WriteFileAtomic(rel, data, 0644);
}

// A blob of `from` as a hard link at the same place beneath `to`: the file is opened beneath
// `from` without a link and linked by its descriptor (/proc/self/fd, which needs no privilege),
// so a folder swapped for a link meanwhile cannot make it link a file from elsewhere.
bool LinkBlob(const DirFd& from, const std::string& rel, const DirFd& to) {
  Result<UniqueFd> source = from.OpenFile(rel, O_PATH | O_CLOEXEC);
  if (!source.ok()) return false;
  Result<DirFd> target_dir = to.OpenDir(DirName(rel));
  if (!target_dir.ok()) return false;
  const std::string by_fd = "/proc/self/fd/" + std::to_string(source->get());
  return ::linkat(AT_FDCWD, by_fd.c_str(), target_dir->get(), BaseName(rel).c_str(), AT_SYMLINK_FOLLOW) == 0;
}

}  // namespace

Status CopyCapsule(const std::string& from, const std::string& to, std::initializer_list<const char*> local_files) {
  // Both folders are opened once; every file is read and written beneath them.
  CAPSULE_ASSIGN_OR_RETURN(DirFd source, DirFd::OpenGiven(from));
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(to));
  CAPSULE_ASSIGN_OR_RETURN(DirFd target, DirFd::OpenGiven(to));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, source.ListTree("", {kLocalDir}));
  for (const TreeEntry& entry : entries) {
    if (IsTempDebris(entry.path)) continue;
    if (entry.type == TreeEntry::Type::kDirectory) {
      CAPSULE_RETURN_IF_ERROR(target.MakeDir(entry.path, (entry.mode & 07777) | 0700));
    } else if (entry.type == TreeEntry::Type::kFile) {
      if (IsBlobPath(entry.path) && LinkBlob(source, entry.path, target)) continue;
      CAPSULE_RETURN_IF_ERROR(CopyFile(source, entry.path, target));
    }
  }
  CAPSULE_RETURN_IF_ERROR(target.MakeDir(kLocalDir, 0700));
  for (const char* local : local_files) {
    Result<struct stat> there = source.Stat(local);
    if (!there.ok() && there.status().code() == Code::kNotFound) continue;
    if (std::string_view(local) == local::kHolder) {
      // `to` takes the place of `from`: the record is bound to its new folder.
      CAPSULE_RETURN_IF_ERROR(RebindHolderRecord(from, to));
      continue;
    }
    CAPSULE_RETURN_IF_ERROR(CopyFile(source, local, target));
  }
  return Status::Ok();
}

}  // namespace capsule
