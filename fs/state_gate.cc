#include "fs/state_gate.h"

#include <cerrno>

#include "fs/errno_map.h"

namespace capsule::fs {

const char* MountStateName(MountState state) {
  switch (state) {
    case MountState::kActive: return "active";
    case MountState::kFrozen: return "frozen";
    case MountState::kRetired: return "retired";
    case MountState::kReadOnly: return "read-only";
  }
  return "unknown";
}

WriteTicket::~WriteTicket() {
  if (gate_ != nullptr) gate_->Leave();
}

Result<WriteTicket> StateGate::EnterWrite(WriteKind kind) {
  std::unique_lock lock(mu_);
  auto open = [&] { return state_ != MountState::kFrozen && !freezing_; };
  if (kind == WriteKind::kData) {
    changed_.wait(lock, open);
  } else if (!changed_.wait_for(lock, kFolderChangeWait, open)) {
    return FsError(EBUSY, "the capsule is frozen: a folder's entries do not change until it thaws, so that its "
                          "readers go on");
  }
  if (state_ == MountState::kRetired) return FsError(EROFS, "capsule retired here (the epoch moved on)");
  if (state_ == MountState::kReadOnly) return FsError(EROFS, "capsule mounted read-only");
  ++in_flight_;
  return WriteTicket(this);
}

void StateGate::Leave() {
  std::lock_guard lock(mu_);
  --in_flight_;
  changed_.notify_all();
}

MountState StateGate::state() const {
  std::lock_guard lock(mu_);
  return state_;
}

Status StateGate::Freeze(const std::function<Status()>& make_current) {
  {
    std::unique_lock lock(mu_);
    if (state_ == MountState::kRetired || state_ == MountState::kReadOnly) {
      return Status::FailedPrecondition("freeze", std::string("the mount is ") + MountStateName(state_));
    }
    if (state_ == MountState::kFrozen) return Status::Ok();
    freezing_ = true;
    changed_.wait(lock, [&] { return in_flight_ == 0; });
  }
  Status made = make_current();
  std::lock_guard lock(mu_);
  freezing_ = false;
  if (state_ == MountState::kActive) state_ = made.ok() ? MountState::kFrozen : MountState::kActive;
  changed_.notify_all();
  return made;
}

void StateGate::Thaw() {
  std::lock_guard lock(mu_);
  if (state_ == MountState::kFrozen) state_ = MountState::kActive;
  changed_.notify_all();
}

void StateGate::Retire() {
  std::lock_guard lock(mu_);
  state_ = MountState::kRetired;
  changed_.notify_all();
}

}  // namespace capsule::fs
