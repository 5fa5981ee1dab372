#include "capsule/format/folder_modes.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdio>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

std::string Octal(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace

std::vector<std::string> FolderModeWarnings(const std::string& dir) {
  std::vector<std::string> warnings;
  Result<DirFd> root = DirFd::OpenGiven(dir);
  if (!root.ok()) return warnings;  // verify itself says why it cannot read the folder
  Result<struct stat> st = root->Stat("");
  if (!st.ok() || (st->st_mode & 077) == 0) return warnings;
  warnings.push_back(dir + ": mode " + Octal(st->st_mode) +
                     " lets group or others into the capsule folder, where every workspace file's bytes sit "
                     "in a blob whatever the file's own mode (chmod 0700 it; see capsule(5), ON-DISK MODES)");
  Result<DirFd> blobs = root->OpenDir(kBlobsDir);
  if (!blobs.ok()) return warnings;
  Result<std::vector<std::string>> names = ListFileNames(blobs->path());
  if (!names.ok()) return warnings;
  size_t readable = 0;
  for (const std::string& name : *names) {
    struct stat blob;
    if (::fstatat(blobs->get(), name.c_str(), &blob, AT_SYMLINK_NOFOLLOW) == 0 && (blob.st_mode & 044) != 0) ++readable;
  }
  if (readable > 0) {
    warnings.push_back(std::string(kBlobsDir) + ": " + std::to_string(readable) + " blob" + (readable == 1 ? "" : "s") +
                       " readable by group or others (chmod 0600 them)");
  }
  return warnings;
}

}  // namespace capsule
