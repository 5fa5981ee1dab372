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

namespace {
thread_local const Interruption* current_interruption = nullptr;
}  // namespace

Interruption::Interruption(StateGate* gate) : gate_(gate) { current_interruption = this; }

Interruption::~Interruption() {
  if (current_interruption == this) current_interruption = nullptr;
}

void Interruption::Fire() {
  fired_ = true;
  gate_->Wake();
}

const Interruption* Interruption::Current() { return current_interruption; }

void StateGate::Wake() {
  std::lock_guard lock(mu_);
  changed_.notify_all();
}

WriteTicket::~WriteTicket() {
  if (gate_ != nullptr) gate_->Leave();
}

Result<WriteTicket> StateGate::EnterWrite(WriteKind kind) {
  std::unique_lock lock(mu_);
  const Interruption* interruption = Interruption::Current();
  auto open = [&]() REQUIRES(mu_) { return state_ != MountState::kFrozen && !freezing_; };
  auto done = [&]() REQUIRES(mu_) { return open() || (interruption != nullptr && interruption->fired()); };
  bool in_time = true;
  if (!done()) {
    ++waiting_;
    if (kind == WriteKind::kData) {
      changed_.wait(lock, done);
    } else {
      in_time = changed_.wait_for(lock, kFolderChangeWait, done);
    }
    --waiting_;
  }
  if (!open() && interruption != nullptr && interruption->fired()) {
    return FsError(EINTR, "interrupted while waiting for the capsule to thaw");
  }
  if (!in_time) {
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
    changed_.wait(lock, [&]() REQUIRES(mu_) { return in_flight_ == 0; });
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
  thaw_deadline_.reset();
  changed_.notify_all();
}

void StateGate::Retire() {
  std::lock_guard lock(mu_);
  state_ = MountState::kRetired;
  thaw_deadline_.reset();
  changed_.notify_all();
}

void StateGate::SetThawDeadline(std::optional<std::chrono::steady_clock::time_point> deadline) {
  std::lock_guard lock(mu_);
  thaw_deadline_ = state_ == MountState::kFrozen ? deadline : std::nullopt;
}

bool StateGate::ThawIsDue() const {
  std::lock_guard lock(mu_);
  return state_ == MountState::kFrozen && thaw_deadline_ && std::chrono::steady_clock::now() >= *thaw_deadline_;
}

int StateGate::waiting() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace capsule::fs
