#include "capsule/format/copy.h"

#include <unistd.h>

#include <string_view>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"

namespace capsule {

namespace {

// The file `rel` of the capsule folder `from`, read beneath it (never through a link), to `to`.
Status CopyFile(const std::string& from, const std::string& rel, const std::string& to) {
  CAPSULE_ASSIGN_OR_RETURN(std::string data, ReadFileBeneath(from, rel));
  return WriteFileAtomic(to, data);
}

}  // namespace

Status CopyCapsule(const std::string& from, const std::string& to, std::initializer_list<const char*> local_files) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(from, {kLocalDir}));
  for (const TreeEntry& entry : entries) {
    if (IsTempDebris(entry.path)) continue;
    std::string source = JoinPath(from, entry.path), target = JoinPath(to, entry.path);
    if (entry.type == TreeEntry::Type::kDirectory) {
      CAPSULE_RETURN_IF_ERROR(MakeDirectories(target));
    } else if (entry.type == TreeEntry::Type::kFile) {
      CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(target)));
      if (IsBlobPath(entry.path) && ::link(source.c_str(), target.c_str()) == 0) continue;
      CAPSULE_RETURN_IF_ERROR(CopyFile(from, entry.path, target));
    }
  }
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(to, kLocalDir)));
  for (const char* local : local_files) {
    std::string source = JoinPath(from, local);
    if (!PathExists(source)) continue;
    if (std::string_view(local) == local::kHolder) {
      // `to` takes the place of `from`: the record is bound to its new folder.
      CAPSULE_RETURN_IF_ERROR(RebindHolderRecord(from, to));
      continue;
    }
    CAPSULE_RETURN_IF_ERROR(CopyFile(from, local, JoinPath(to, local)));
  }
  return Status::Ok();
}

}  // namespace capsule
