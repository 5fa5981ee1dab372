// The mount's state and the gate every mutating operation passes: active, frozen (writers
// wait, readers go on), retired or read-only (mutations fail with EROFS).
//
// A change to a folder's entries (create, mkdir, symlink, unlink, rmdir, rename) is asked of
// us while the kernel holds that folder's lock, so every lookup and listing of the folder
// waits behind it. Such a change waits for a thaw at most kFolderChangeWait, then fails with
// EBUSY: a reader of a frozen folder waits no longer than that.
//
// A wait for a thaw can be interrupted: a request whose caller got a signal (Ctrl-C, SIGTERM,
// SIGKILL) is taken back by the kernel (FUSE's INTERRUPT), and its wait ends with EINTR
// (Interruption). An admin's freeze may carry a deadline after which it thaws by itself.
//
// Thread-safety: all members are guarded by mu_; safe from any thread. A WriteTicket must be
// released (destroyed) before the same thread calls Freeze. Lock order: libfuse's request lock
// (held while it calls an interrupt function) before mu_, never the reverse.
#pragma once

#include <atomic>
#include <chrono>
#include <optional>
#include <condition_variable>
#include <functional>
#include <mutex>

#include "capsule/base/mutex.h"
#include "capsule/base/status.h"

namespace capsule::fs {

enum class MountState { kActive, kFrozen, kRetired, kReadOnly };
const char* MountStateName(MountState state);

class StateGate;

// The request this thread serves, which its caller may take back: while one is current on a
// thread, a wait of that thread for a thaw ends with EINTR once Fire is called (from any
// thread: libfuse calls it on the thread that reads the kernel's INTERRUPT). At most one per
// thread; it must outlive every call that may Fire it.
class Interruption {
 public:
  explicit Interruption(StateGate* gate);
  ~Interruption();
  Interruption(const Interruption&) = delete;
  Interruption& operator=(const Interruption&) = delete;

  void Fire();
  bool fired() const { return fired_.load(); }
  // The one current on this thread, or null.
  static const Interruption* Current();

 private:
  StateGate* gate_;
  std::atomic<bool> fired_{false};
};

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
  // Waits while frozen (as `kind` says); EROFS when retired or read-only; EINTR when the
  // thread's current Interruption fires while it waits.
  Result<WriteTicket> EnterWrite(WriteKind kind = WriteKind::kData);
  MountState state() const;
  // Stops new writes, waits until none is in flight, then runs `make_current` (which commits
  // what is open and rewrites the capsule). On its failure the gate goes back to active.
  Status Freeze(const std::function<Status()>& make_current);
  void Thaw();
  // Every waiting and future write fails with EROFS.
  void Retire();
  // While frozen: the time after which the freeze is to end by itself (none: no deadline). A
  // thaw, a retire or a new deadline replaces it.
  void SetThawDeadline(std::optional<std::chrono::steady_clock::time_point> deadline);
  // Frozen with a deadline that has passed.
  bool ThawIsDue() const;
  // How many data writes wait for a thaw now.
  int waiting() const;

 private:
  friend class WriteTicket;
  friend class Interruption;
  void Leave();
  void Wake();  // an Interruption fired: the waits look again

  mutable Mutex mu_;
  std::condition_variable changed_;  // state_ or in_flight_ changed
  MountState state_ GUARDED_BY(mu_);
  int in_flight_ GUARDED_BY(mu_) = 0;
  bool freezing_ GUARDED_BY(mu_) = false;  // a Freeze is draining
  int waiting_ GUARDED_BY(mu_) = 0;  // writes waiting for a thaw
  std::optional<std::chrono::steady_clock::time_point> thaw_deadline_ GUARDED_BY(mu_);
};

}  // namespace capsule::fs
