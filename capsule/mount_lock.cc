#include "capsule/mount_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "capsule/layout.h"

namespace capsule {
namespace {

constexpr char kMountLockPath[] = ".capsule/mount.lock";
constexpr char kControlSocketPath[] = ".capsule/control.sock";

}  // namespace

Result<UniqueFd> LockForMount(const std::string& dir) {
  // Not a capsule (a mistyped path): nothing is made there; opening it names the problem.
  if (!PathExists(JoinPath(dir, kManifestPath))) return UniqueFd();
  std::string path = JoinPath(dir, kMountLockPath);
  if (::mkdir(JoinPath(dir, kLocalDir).c_str(), 0755) != 0 && errno != EEXIST) {
    if (errno == EROFS || errno == EACCES || errno == EPERM) return UniqueFd();  // a read-only copy
    return Status::IOError(JoinPath(dir, kLocalDir), errno);
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  // Another user's folder or a read-only one: flock(2) works on a descriptor open for reading.
  if (fd < 0 && (errno == EROFS || errno == EACCES || errno == EPERM)) fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT || errno == EACCES || errno == EPERM) return UniqueFd();  // cannot be made here
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
  ::unlink(JoinPath(dir, kControlSocketPath).c_str());
  return lock;
}

Status WaitForUnmountToFinish(const std::string& dir, std::chrono::milliseconds timeout) {
  std::string path = JoinPath(dir, kMountLockPath);
  UniqueFd lock(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!lock.valid()) return Status::Ok();  // never mounted here
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (::flock(lock.get(), LOCK_SH | LOCK_NB) == 0) return Status::Ok();  // no driver
    if (errno != EWOULDBLOCK) return Status::IOError(path, errno);
    if (PathExists(JoinPath(dir, kControlSocketPath))) return Status::Ok();  // mounted and serving
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::Unavailable(dir, "capsulefs is still finishing an unmount");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status WaitForDriverToExit(const std::string& dir, std::chrono::milliseconds timeout) {
  std::string path = JoinPath(dir, kMountLockPath);
  UniqueFd lock(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!lock.valid()) return Status::Ok();  // never mounted here
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (::flock(lock.get(), LOCK_SH | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return Status::IOError(path, errno);
    if (std::chrono::steady_clock::now() >= deadline) return Status::Unavailable(dir, "capsulefs has not exited");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

}  // namespace capsule
