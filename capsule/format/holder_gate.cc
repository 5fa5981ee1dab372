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
  // Beneath the capsule folder: a link in the place of the lock or the record is refused.
  Result<UniqueFd> lock = OpenBeneathGiven(dir_, local::kHolderLock, O_RDONLY | O_CREAT, 0644);
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
  const std::string path = JoinPath(dir_, local::kHolder);
  // Opened before the check and compared after it: the file kept is the file checked.
  Result<UniqueFd> record = OpenBeneathGiven(dir_, local::kHolder, O_RDONLY);
  CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(dir_));
  struct stat opened, named;
  if (record.ok() && ::fstat(record->get(), &opened) == 0 && ::lstat(path.c_str(), &named) == 0 &&
      SameFile(opened, named)) {
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
    struct stat now;
    if (record_.valid() && ::lstat(JoinPath(dir_, local::kHolder).c_str(), &now) == 0 && SameFile(now, checked_)) {
      return hold;  // the record checked last time, unchanged
    }
    // The record changed (or was never read): the lock file may have been replaced with the
    // folder too (a folder swapped into place), so it must be the one at the path.
    struct stat held, named;
    if (::fstat(lock_.get(), &held) == 0 && ::lstat(JoinPath(dir_, local::kHolderLock).c_str(), &named) == 0 &&
        held.st_dev == named.st_dev && held.st_ino == named.st_ino) {
      CAPSULE_RETURN_IF_ERROR(CheckRecord());
      return hold;
    }
    record_.Reset();
    { Hold release = std::move(hold); }  // unlocked before the old descriptor is closed
    CAPSULE_RETURN_IF_ERROR(OpenLock());  // then again, on the lock file at the path
  }
}

}  // namespace capsule
