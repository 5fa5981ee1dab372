// A lock one process holds for as long as it runs: flock(2) on a file, which names the
// holder's pid so that whoever is refused can say who holds it. The kernel drops the lock
// when the process dies, however it dies, so a lock is never left behind by a crash.
//
// Used for one sidecar per root folder and one move out of a capsule at a time.
//
// Thread-safety: a single-owner object; Acquire is safe from any thread.
#pragma once

#include <string>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

class ProcessLock {
 public:
  // Takes the lock at `path` without waiting (the file is made when missing). When another
  // process holds it: FailedPrecondition "`what`: held by pid N" (or "held by another
  // process" when it has not written its pid yet).
  static Result<ProcessLock> Acquire(const std::string& path, const std::string& what);
  // The same on the lock file `fd`, opened by the caller (beneath a held folder, say); `path`
  // names it in messages.
  static Result<ProcessLock> Acquire(UniqueFd fd, const std::string& path, const std::string& what);

  ProcessLock(ProcessLock&&) = default;
  ProcessLock& operator=(ProcessLock&&) = default;

 private:
  explicit ProcessLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;
};

}  // namespace capsule
