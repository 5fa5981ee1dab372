#include "capsule/base/process_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

namespace capsule {

namespace {

long PidIn(int fd) {
  char text[32] = {};
  ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  return n > 0 ? std::strtol(text, nullptr, 10) : 0;
}

std::string Holder(long pid) { return pid > 0 ? "held by pid " + std::to_string(pid) : "held by another process"; }

}  // namespace

Result<ProcessLock> ProcessLock::Acquire(const std::string& path, const std::string& what) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  return Acquire(std::move(fd), path, what);
}

Result<ProcessLock> ProcessLock::Acquire(UniqueFd fd, const std::string& path, const std::string& what) {
  while (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) return Status::FailedPrecondition(what, Holder(PidIn(fd.get())));
    return Status::IOError(path + ": flock", errno);
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd.get(), 0) != 0) return Status::IOError(path, errno);
  if (::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return Status::IOError(path, errno);
  }
  return ProcessLock(std::move(fd));
}

}  // namespace capsule
