#include "capsule/mount_lock.h"

#include <fcntl.h>
#include <sys/file.h>
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
  std::string path = JoinPath(dir, kMountLockPath);
  Status made = MakeDirectories(JoinPath(dir, kLocalDir));
  int fd = made.ok() ? ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
  if (fd < 0) {
    int err = made.ok() ? errno : made.sys_errno().value_or(0);
    if (err == EROFS || err == EACCES || err == EPERM) return UniqueFd();
    return made.ok() ? Status::IOError(path, err) : made;
  }
  UniqueFd lock(fd);
  if (::flock(lock.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EWOULDBLOCK) return Status::AlreadyExists(dir, "is mounted by another capsulefs");
    return Status::IOError(path, errno);
  }
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
