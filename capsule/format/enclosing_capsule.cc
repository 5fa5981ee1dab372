#include "capsule/format/enclosing_capsule.h"

#include <sys/stat.h>

#include <cerrno>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"

namespace capsule {

namespace {

// The folder of a capsulefs mount that is the agent's workspace (capsulefs(8)).
constexpr char kMountWorkspace[] = "files";

bool IsRegularFile(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool IsFolder(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Where a write of `path` lands: the longest existing part resolved by realpath(3), the
// names after it (folders a command would create) taken as written, "." and ".." applied.
Result<std::string> WhereWritten(const std::string& path) {
  std::string existing = path.empty() ? "." : path;
  std::vector<std::string> rest;  // innermost last
  for (;;) {
    struct stat st;
    if (::lstat(existing.c_str(), &st) == 0) break;
    if (errno != ENOENT && errno != ENOTDIR) return Status::IOError(existing, errno);
    std::string parent = DirName(existing);
    if (parent == existing) break;  // "/" or "."
    rest.push_back(BaseName(existing));
    existing = parent;
  }
  std::string real = RealPath(existing);
  if (real.empty()) return Status::IOError(existing, errno);
  for (auto name = rest.rbegin(); name != rest.rend(); ++name) {
    if (*name == "." || name->empty()) continue;
    real = *name == ".." ? DirName(real) : JoinPath(real, *name);
  }
  return real;
}

// Whether `inner` is `outer` or lies under it (both absolute, resolved).
bool IsUnder(const std::string& inner, const std::string& outer) {
  if (outer == "/") return true;
  return inner.compare(0, outer.size(), outer) == 0 && (inner.size() == outer.size() || inner[outer.size()] == '/');
}

}  // namespace

Status NotACapsule(const std::string& dir, const std::string& why) {
  return Status::InvalidArgument(dir, "not a capsule folder (" + why + ")\n" + kNotACapsuleHint);
}

Status CheckCapsuleFolder(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::NotFound(dir, "no such file or folder");
    return Status::IOError(dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) return NotACapsule(dir, "not a folder");
  if (!IsRegularFile(JoinPath(dir, kManifestPath))) return NotACapsule(dir);
  return Status::Ok();
}

Result<std::optional<EnclosingCapsule>> FindEnclosingCapsule(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(std::string target, WhereWritten(path));
  for (std::string folder = DirName(target);; folder = DirName(folder)) {
    struct stat here;
    bool exists = ::lstat(folder.c_str(), &here) == 0;
    if (exists && IsRegularFile(JoinPath(folder, kControlFileName))) {
      struct stat above;
      std::string parent = DirName(folder);
      if (folder == "/" || (::lstat(parent.c_str(), &above) == 0 && above.st_dev != here.st_dev)) {
        EnclosingCapsule mount{folder, true, IsUnder(target, JoinPath(folder, kMountWorkspace)) &&
                                                 target != JoinPath(folder, kMountWorkspace)};
        return std::optional<EnclosingCapsule>(mount);
      }
    }
    if (exists && IsRegularFile(JoinPath(folder, kManifestPath)) && IsFolder(JoinPath(folder, kLocalDir))) {
      return std::optional<EnclosingCapsule>(EnclosingCapsule{folder, false, false});
    }
    if (folder == "/") break;
    if (exists) {
      struct stat above;
      if (::lstat(DirName(folder).c_str(), &above) == 0 && above.st_dev != here.st_dev) break;  // a file system's root
    }
  }
  return std::optional<EnclosingCapsule>();
}

Status CheckNotInsideCapsule(const std::string& what, const std::string& path, bool secret_inside_workspace) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<EnclosingCapsule> inside, FindEnclosingCapsule(path));
  if (!inside) return Status::Ok();
  const std::string named = what.empty() ? path : what + " " + path;
  if (inside->mount) {
    if (inside->in_workspace && !secret_inside_workspace) return Status::Ok();
    if (inside->in_workspace) {
      return Status::InvalidArgument(named, "is inside the workspace of the capsulefs mount " + inside->folder +
                                                ": a private key never goes into a capsule, where it would travel "
                                                "with every export and move");
    }
    return Status::InvalidArgument(named, "is inside the capsulefs mount " + inside->folder +
                                              " (only its files/ takes a user's files); nothing written");
  }
  return Status::InvalidArgument(named, "is inside the capsule folder " + inside->folder +
                                            ", which only its own commands change; nothing written");
}

}  // namespace capsule
