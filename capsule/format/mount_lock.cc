#include "capsule/format/mount_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string_view>
#include <functional>
#include <thread>

#include "capsule/base/dir_fd.h"
#include "capsule/format/layout.h"

namespace capsule {
namespace {

// A path as /proc/self/mountinfo writes it: space, tab, newline and backslash in octal.
std::string MountinfoEscaped(const std::string& path) {
  std::string out;
  for (char c : path) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\\') {
      char octal[5];
      std::snprintf(octal, sizeof octal, "\\%03o", static_cast<unsigned char>(c));
      out += octal;
    } else {
      out += c;
    }
  }
  return out;
}

// Whether `mountpoint` is a FUSE mount in this process's mount table (read from the kernel,
// never through the mount itself, which may be the one going away).
bool FuseMountedAt(const std::string& mountpoint) {
  Result<std::string> table = ReadFile("/proc/self/mountinfo");
  if (!table.ok()) return true;  // cannot tell: as before, trust the control socket
  std::string wanted = MountinfoEscaped(mountpoint);
  size_t start = 0;
  while (start < table->size()) {
    size_t end = table->find('\n', start);
    if (end == std::string::npos) end = table->size();
    std::string_view line(table->data() + start, end - start);
    start = end + 1;
    // id parent major:minor root MOUNTPOINT options ... - FSTYPE source superoptions
    size_t field = 0, pos = 0;
    std::string_view point;
    while (field < 5 && pos <= line.size()) {
      size_t space = line.find(' ', pos);
      if (space == std::string_view::npos) space = line.size();
      if (field == 4) point = line.substr(pos, space - pos);
      pos = space + 1;
      ++field;
    }
    if (point != wanted) continue;
    size_t dash = line.find(" - ");
    if (dash != std::string_view::npos && line.substr(dash + 3, 4) == "fuse") return true;
  }
  return false;
}

}  // namespace

std::string RecordedMountpoint(const std::string& dir) {
  Result<std::string> text = ReadFileBeneath(dir, local::kMountLock);
  return text.ok() ? *text : "";
}

Status RecordMountpoint(int lock, const std::string& mountpoint) {
  std::string path = RealPath(mountpoint);
  if (path.empty()) return Status::Ok();  // nothing to tell; the control socket still does
  if (::ftruncate(lock, 0) != 0) return Status::IOError(local::kMountLock, errno);
  if (::pwrite(lock, path.data(), path.size(), 0) != static_cast<ssize_t>(path.size())) {
    return Status::IOError(local::kMountLock, errno);
  }
  return Status::Ok();
}

Result<UniqueFd> LockForMount(const std::string& dir) {
  // Not a capsule (a mistyped path): nothing is made there; opening it names the problem.
  if (!PathExists(JoinPath(dir, kManifestPath))) return UniqueFd();
  std::string path = JoinPath(dir, local::kMountLock);
  // The folder is opened once and .capsule made and reached beneath it without a link: one
  // where the folder belongs is refused, naming it, before anything is made or removed in
  // what it points to.
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  if (::mkdirat(root.get(), kLocalDir, 0700) != 0 && errno != EEXIST) {
    if (errno == EROFS || errno == EACCES || errno == EPERM) return UniqueFd();  // a read-only copy
    return Status::IOError(JoinPath(dir, kLocalDir), errno);
  }
  CAPSULE_ASSIGN_OR_RETURN(DirFd local, root.OpenDir(kLocalDir));
  const std::string name = BaseName(local::kMountLock);
  int fd = ::openat(local.get(), name.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  // Another user's folder or a read-only one: flock(2) works on a descriptor open for reading.
  if (fd < 0 && (errno == EROFS || errno == EACCES || errno == EPERM)) {
    fd = ::openat(local.get(), name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  }
  if (fd < 0) {
    if (errno == ENOENT || errno == EACCES || errno == EPERM) return UniqueFd();  // cannot be made here
    if (errno == ELOOP) return Status::InvalidArgument(path, "is a link; links are never followed");
    return Status::IOError(path, errno);
  }
  UniqueFd lock(fd);
  // A command waiting for an unmount to finish holds the lock shared for an instant: a start
  // that meets it tries again rather than mistaking it for a driver.
  for (int attempt = 0;; ++attempt) {
    if (::flock(lock.get(), LOCK_EX | LOCK_NB) == 0) break;
    if (errno != EWOULDBLOCK) return Status::IOError(path, errno);
    if (attempt == 50) return Status::AlreadyExists(dir, "is mounted by another capsulefs");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // A control socket left by a driver that died is not a mount serving the folder.
  ::unlinkat(local.get(), BaseName(local::kControlSocket).c_str(), 0);
  return lock;
}

namespace {

// Waits until no driver holds `dir`'s mount lock, or until `done_early` says waiting is
// over; Unavailable saying `still` after `timeout`.
Status WaitForLock(const std::string& dir, std::chrono::milliseconds timeout, const std::function<bool()>& done_early,
                   const char* still) {
  std::string path = JoinPath(dir, local::kMountLock);
  // Beneath the folder, never through a link: a link in the lock's place is refused.
  Result<UniqueFd> opened = OpenBeneathGiven(dir, local::kMountLock, O_RDONLY | O_CLOEXEC);
  if (!opened.ok() && opened.status().code() == Code::kInvalidArgument) return opened.status();
  if (!opened.ok()) return Status::Ok();  // never mounted here
  UniqueFd lock = std::move(opened).value();
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::flock(lock.get(), LOCK_SH | LOCK_NB) == 0) return Status::Ok();  // no driver
    if (errno != EWOULDBLOCK) return Status::IOError(path, errno);
    if (done_early()) return Status::Ok();
    if (std::chrono::steady_clock::now() >= deadline) return Status::Unavailable(dir, still);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

Status WaitForUnmountToFinish(const std::string& dir, std::chrono::milliseconds timeout) {
  // A driver whose control socket is there and whose mountpoint is still mounted is serving,
  // not finishing. (Right after `fusermount3 -u` the socket is still there for a moment.)
  std::string mountpoint = RecordedMountpoint(dir);
  return WaitForLock(
      dir, timeout,
      [&] {
        return PathExists(JoinPath(dir, local::kControlSocket)) && (mountpoint.empty() || FuseMountedAt(mountpoint));
      },
      "capsulefs is still finishing an unmount");
}

bool HeldByDriver(const std::string& dir) {
  UniqueFd lock(::open(JoinPath(dir, local::kMountLock).c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!lock.valid()) return false;  // never mounted here
  return ::flock(lock.get(), LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
}

Status WaitForDriverToExit(const std::string& dir, std::chrono::milliseconds timeout) {
  return WaitForLock(dir, timeout, [] { return false; }, "capsulefs has not exited");
}

}  // namespace capsule
