// SHA-256 of bytes handed over in pieces, computed on a thread of its own: a writer hands each
// piece over and writes it meanwhile, so the digest of what it wrote costs it no time.
//
// Pieces are views: the caller keeps each one's bytes alive and unchanged until Finish returns.
// Pieces are hashed in the order they were handed over.
//
// Thread-safety: one caller thread; the hashing thread starts with the first piece.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/sha256.h"

namespace capsule {

class BackgroundSha256 {
 public:
  BackgroundSha256() = default;
  // Waits for the hashing thread when Finish was not called.
  ~BackgroundSha256();
  BackgroundSha256(const BackgroundSha256&) = delete;
  BackgroundSha256& operator=(const BackgroundSha256&) = delete;

  void Update(std::string_view piece);
  // Returns once every piece handed over so far is hashed: their bytes may then change.
  void Wait();
  // The digest of every piece, in lowercase hex, once all are hashed. Call once.
  std::string FinishHex();

 private:
  void HandOver();
  void Run();

  static constexpr size_t kBatchBytes = 1 << 20;

  Sha256 sha_;                          // used by the hashing thread only, once it runs
  std::vector<std::string_view> batch_;  // the caller's, not yet handed over
  size_t batch_bytes_ = 0;
  std::thread thread_;
  Mutex mu_;
  std::condition_variable changed_;
  std::condition_variable hashed_changed_;
  uint64_t handed_ = 0;                  // the caller's: pieces handed to the thread
  std::vector<std::string_view> queued_ GUARDED_BY(mu_);
  bool finished_ GUARDED_BY(mu_) = false;  // no more pieces come
  uint64_t hashed_ GUARDED_BY(mu_) = 0;  // pieces hashed
};

}  // namespace capsule
