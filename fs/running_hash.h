// The digest of a working copy, computed beside its writes: each write is answered first and
// hashed after (fs/fuse_table.cc), so that hashing one write overlaps the transfer of the next.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "capsule/base/mutex.h"
#include "capsule/base/sha256.h"

namespace capsule::fs {

class RunningHash;

// A write's bytes owed to its file's running digest: hashed by Run, or on destruction, so
// that no queued write is ever left out (RunningHash::FinishHex waits for each). The bytes
// must live until then (a FUSE request's buffer lives until its handler returns). Running
// waits for every earlier write of the file to be hashed: one thread must not hold a later
// write's record while it owes an earlier one (each FUSE request owes its own write only).
class DeferredHash {
 public:
  DeferredHash() = default;
  DeferredHash(std::shared_ptr<RunningHash> hash, uint64_t offset, std::string_view bytes)
      : hash_(std::move(hash)), offset_(offset), bytes_(bytes) {}
  DeferredHash(DeferredHash&& other) noexcept
      : hash_(std::move(other.hash_)), offset_(other.offset_), bytes_(other.bytes_) {}
  // No assignment: a record replaced would be hashed on the spot, perhaps before an earlier
  // write it must wait for and that this same thread owes.
  DeferredHash& operator=(DeferredHash&&) = delete;
  ~DeferredHash() { Run(); }
  void Run();

 private:
  std::shared_ptr<RunningHash> hash_;
  uint64_t offset_ = 0;
  std::string_view bytes_;
};

// The digest of a working copy written in order from its start, kept beside the writes. A
// write is answered first and hashed after, so that hashing one write overlaps the transfer
// of the next: writes are queued in file order under the node's wc_mu, and hashed in that
// order whichever threads run them.
class RunningHash {
 public:
  // Guarded by the node's wc_mu: bytes [0, queued()) are written, and each write among them
  // is hashed or will be.
  uint64_t queued() const { return queued_; }
  // Under wc_mu: the `bytes` just written at `offset` == queued() join the digest; the caller
  // hashes them, outside wc_mu, through what is returned.
  static DeferredHash Queue(const std::shared_ptr<RunningHash>& hash, uint64_t offset, std::string_view bytes) {
    hash->queued_ = offset + bytes.size();
    return DeferredHash(hash, offset, bytes);
  }
  // Under wc_mu: waits until every queued write is hashed; the digest of bytes [0, queued()).
  std::string FinishHex() {
    std::unique_lock lock(mu_);
    turn_.wait(lock, [&]() REQUIRES(mu_) { return hashed_ == queued_; });
    return sha_.FinishHex();
  }
  // How many writes wait for an earlier one to be hashed now (for tests).
  int waiting_turns() {
    std::lock_guard lock(mu_);
    return waiting_turns_;
  }

 private:
  friend class DeferredHash;
  // Adds `bytes`, once the bytes before `offset` are in.
  void Hash(uint64_t offset, std::string_view bytes) {
    std::unique_lock lock(mu_);
    ++waiting_turns_;
    turn_.wait(lock, [&]() REQUIRES(mu_) { return hashed_ == offset; });
    --waiting_turns_;
    sha_.Update(bytes);
    hashed_ += bytes.size();
    turn_.notify_all();
  }

  uint64_t queued_ = 0;
  Mutex mu_;
  std::condition_variable turn_;
  Sha256 sha_ GUARDED_BY(mu_);
  uint64_t hashed_ GUARDED_BY(mu_) = 0;  // bytes [0, hashed_) are in sha_
  int waiting_turns_ GUARDED_BY(mu_) = 0;
};

inline void DeferredHash::Run() {
  if (!hash_) return;
  hash_->Hash(offset_, bytes_);
  hash_.reset();
}

}  // namespace capsule::fs
