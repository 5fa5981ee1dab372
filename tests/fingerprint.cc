#include "tests/fingerprint.h"

#include <sys/stat.h>

#include <vector>

#include "capsule/base/file_io.h"

namespace capsule::testing {

std::string FolderFingerprint(const std::string& dir) {
  std::string out;
  struct stat st;
  if (::lstat(dir.c_str(), &st) != 0) return "<missing>";
  out += std::to_string(st.st_ino) + " " + std::to_string(st.st_mtim.tv_sec) + "." +
         std::to_string(st.st_mtim.tv_nsec) + " " + std::to_string(st.st_mode) + "\n";
  Result<std::vector<TreeEntry>> tree = ListTree(dir);
  if (!tree.ok()) return "<" + tree.status().message() + ">";
  for (const TreeEntry& entry : *tree) {
    out += entry.path + " " + std::to_string(entry.ino) + " " + std::to_string(entry.size) + " " +
           std::to_string(entry.mtime.tv_sec) + "." + std::to_string(entry.mtime.tv_nsec) + " " +
           std::to_string(entry.ctime.tv_sec) + "." + std::to_string(entry.ctime.tv_nsec) + "\n";
  }
  return out;
}

}  // namespace capsule::testing
