#include "capsule/format/holder_gate.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>

#include "capsule/format/holder.h"
#include "capsule/format/local_files.h"

namespace capsule {

namespace {

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino && a.st_size == b.st_size &&
         a.st_mtim.tv_sec == b.st_mtim.tv_sec && a.st_mtim.tv_nsec == b.st_mtim.tv_nsec &&
         a.st_ctim.tv_sec == b.st_ctim.tv_sec && a.st_ctim.tv_nsec == b.st_ctim.tv_nsec;
}

}  // namespace

HolderGate::Hold::~Hold() {
  if (fd_ >= 0) ::flock(fd_, LOCK_UN);
}

Status HolderGate::OpenLock() {
  // The capsule folder is opened once; the lock and the record are opened and looked at
  // beneath it: a link in the place of either is refused, never followed.
  if (!root_.valid()) {
    Result<DirFd> root = DirFd::OpenGiven(dir_);
    if (!root.ok()) {
      CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(dir_));
      return root.status();
    }
    root_ = std::move(root).value();
  }
  Result<UniqueFd> lock = root_.OpenFile(local::kHolderLock, O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
  if (!lock.ok()) {
    // No .capsule/ folder (not a capsule) or one this user cannot change: say why not held.
    CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(dir_));
    return lock.status();
  }
  lock_ = std::move(lock).value();
  return Status::Ok();
}

Status HolderGate::CheckRecord() {
  record_.Reset();
  // Opened before the check and compared after it: the file kept is the file checked.
  Result<UniqueFd> record = root_.OpenFile(local::kHolder, O_RDONLY | O_CLOEXEC);
  CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(dir_));
  struct stat opened;
  Result<struct stat> named = root_.Stat(local::kHolder);
  if (record.ok() && ::fstat(record->get(), &opened) == 0 && named.ok() && SameFile(opened, *named)) {
    record_ = std::move(record).value();
    checked_ = opened;
  }
  return Status::Ok();
}

Result<HolderGate::Hold> HolderGate::HoldForWrite() {
  if (!lock_.valid()) CAPSULE_RETURN_IF_ERROR(OpenLock());
  for (;;) {
    while (::flock(lock_.get(), LOCK_SH) != 0) {
      if (errno != EINTR) return Status::IOError(JoinPath(dir_, local::kHolderLock) + ": flock", errno);
    }
    Hold hold(lock_.get());
    if (record_.valid()) {
      Result<struct stat> now = root_.Stat(local::kHolder);
      if (now.ok() && SameFile(*now, checked_)) return hold;  // the record checked last time, unchanged
    }
    // The record changed (or was never read): the lock file may have been replaced with the
    // folder too (a folder swapped into place), so it must be the one at the path.
    struct stat held;
    Result<struct stat> named = root_.Stat(local::kHolderLock);
    if (::fstat(lock_.get(), &held) == 0 && named.ok() && held.st_dev == named->st_dev &&
        held.st_ino == named->st_ino) {
      CAPSULE_RETURN_IF_ERROR(CheckRecord());
      return hold;
    }
    record_.Reset();
    { Hold release = std::move(hold); }  // unlocked before the old descriptor is closed
    CAPSULE_RETURN_IF_ERROR(OpenLock());  // then again, on the lock file at the path
  }
}

}  // namespace capsule
