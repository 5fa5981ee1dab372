// HoldForWrite for a writer that lives across many writes (a Journal appending): the holder
// record's lock and the record itself are kept open, so that each write's check costs a
// flock(2) and a stat(2) instead of opening, reading and parsing .capsule/holder.json.
//
// The guarantee is HoldForWrite's: Hold() returns with flock(LOCK_SH) held on
// .capsule/holder.lock and the record saying this machine holds the capsule, active; no
// transition (freeze, retire) runs until the hold is dropped. The record is read again
// whenever the file at .capsule/holder.json is not the one last read (every change of the
// record writes a new file and renames it into place; the one read stays open here, so its
// inode cannot be reused meanwhile) or its size or times changed.
//
// Thread-safety: one thread at a time per gate; separate gates (in one process or many)
// are independent.
#pragma once

#include <sys/stat.h>

#include <string>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

class HolderGate {
 public:
  // The shared lock, released on destruction.
  class Hold {
   public:
    explicit Hold(int fd) : fd_(fd) {}
    Hold(Hold&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
    Hold& operator=(Hold&&) = delete;
    ~Hold();

   private:
    int fd_;
  };

  explicit HolderGate(std::string capsule_dir) : dir_(std::move(capsule_dir)) {}
  HolderGate(HolderGate&&) = default;

  // CheckHeldForWrite under the shared lock, the lock returned held.
  Result<Hold> HoldForWrite();

 private:
  Status OpenLock();
  // Reads and checks the record under the lock; remembers the file read when it is ok.
  Status CheckRecord();

  std::string dir_;
  DirFd root_;       // the capsule folder, opened once at the first hold
  UniqueFd lock_;    // .capsule/holder.lock
  UniqueFd record_;  // .capsule/holder.json as last checked and found active
  struct stat checked_ {};
};

}  // namespace capsule
