// The mount's state and the gate every mutating operation passes: active, frozen (writers
// wait, readers go on), retired or read-only (mutations fail with EROFS).
//
// A change to a folder's entries (create, mkdir, symlink, unlink, rmdir, rename) is asked of
// us while the kernel holds that folder's lock, so every lookup and listing of the folder
// waits behind it. Such a change waits for a thaw at most kFolderChangeWait, then fails with
// EBUSY: a reader of a frozen folder waits no longer than that.
//
// Thread-safety: all members are guarded by mu_; safe from any thread. A WriteTicket must be
// released (destroyed) before the same thread calls Freeze.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "capsule/base/status.h"

namespace capsule::fs {

enum class MountState { kActive, kFrozen, kRetired, kReadOnly };
const char* MountStateName(MountState state);

class StateGate;

// How long a change to a folder's entries waits for a frozen mount to thaw.
inline constexpr std::chrono::milliseconds kFolderChangeWait{1000};

enum class WriteKind {
  kData,          // a file's content or attributes: waits for the thaw however long
  kFolderChange,  // a folder's entries: waits kFolderChangeWait at most, then EBUSY
};

// Counts one mutating operation in flight; freeze waits for every ticket to go.
class WriteTicket {
 public:
  explicit WriteTicket(StateGate* gate) : gate_(gate) {}
  WriteTicket(WriteTicket&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
  WriteTicket& operator=(WriteTicket&&) = delete;
  ~WriteTicket();

 private:
  StateGate* gate_;
};

class StateGate {
 public:
  explicit StateGate(MountState initial) : state_(initial) {}
  // Waits while frozen (as `kind` says); EROFS when retired or read-only.
  Result<WriteTicket> EnterWrite(WriteKind kind = WriteKind::kData);
  MountState state() const;
  // Stops new writes, waits until none is in flight, then runs `make_current` (which commits
  // what is open and rewrites the capsule). On its failure the gate goes back to active.
  Status Freeze(const std::function<Status()>& make_current);
  void Thaw();
  // Every waiting and future write fails with EROFS.
  void Retire();

 private:
  friend class WriteTicket;
  void Leave();

  mutable std::mutex mu_;
  std::condition_variable changed_;  // state_ or in_flight_ changed
  MountState state_;                 // guarded by mu_
  int in_flight_ = 0;                // guarded by mu_
  bool freezing_ = false;            // guarded by mu_: a Freeze is draining
};

}  // namespace capsule::fs
