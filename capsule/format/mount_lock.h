// Who is mounting a capsule folder: .capsule/mount.lock, an exclusive flock(2) that capsulefs
// takes before it recovers the folder and keeps until its last checkpoint is on disk (after
// the kernel has already let go of the mountpoint). It keeps a second driver off a mounted
// folder, and lets a command that reads the folder wait for a driver that is finishing.
#pragma once

#include <chrono>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

// Takes the lock for a mount of `dir`; AlreadyExists when another capsulefs holds it. An
// unwritable .capsule/ (a read-only copy) gives an empty handle: nothing to protect there.
Result<UniqueFd> LockForMount(const std::string& dir);

// Writes the driver's mountpoint into the lock file it holds (`lock`, from LockForMount), so
// that a command can tell a driver still mounted from one finishing an unmount.
Status RecordMountpoint(int lock, const std::string& mountpoint);

// The mountpoint the driver holding `dir` recorded in the lock file (read beneath `dir`, never
// through a link); empty when it recorded none or the file cannot be read.
std::string RecordedMountpoint(const std::string& dir);

// When a capsulefs still holds the lock but is no longer mounted (it is writing its last
// checkpoint after an unmount; its mountpoint has left /proc/self/mountinfo, or it has closed
// its control channel), waits for it to let go, up to `timeout`; then Unavailable. Returns at
// once when no driver holds the folder or one is mounted and serving it.
Status WaitForUnmountToFinish(const std::string& dir,
                              std::chrono::milliseconds timeout = std::chrono::seconds(60));

// Whether a capsulefs holds the folder now (mounted and serving it, or finishing an unmount).
bool HeldByDriver(const std::string& dir);

// Waits until no capsulefs holds the folder at all (after an unmount, once the driver has
// exited), up to `timeout`; then Unavailable.
Status WaitForDriverToExit(const std::string& dir,
                           std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace capsule
