#include "move/stream/digest_check.h"

#include <algorithm>

namespace capsule::move {

DigestCheck::DigestCheck(size_t buffers, size_t buffer_size)
    : max_buffers_(std::max<size_t>(buffers, 1)), buffer_size_(buffer_size) {}

DigestCheck::~DigestCheck() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  work_.notify_one();
  thread_.join();
}

DigestCheck::Buffer* DigestCheck::Take() {
  std::unique_lock lock(mu_);
  if (free_.empty() && buffers_.size() < max_buffers_) {
    buffers_.push_back(std::make_unique<Buffer>(buffer_size_));
    return buffers_.back().get();
  }
  if (free_.empty() && hasher_waiting_) work_.notify_one();
  receiver_waiting_ = true;
  done_.wait(lock, [this]() REQUIRES(mu_) { return !free_.empty(); });
  receiver_waiting_ = false;
  Buffer* buffer = free_.back();
  free_.pop_back();
  return buffer;
}

void DigestCheck::Give(Buffer* buffer) {
  std::lock_guard lock(mu_);
  free_.push_back(buffer);
}

void DigestCheck::Queue(Item item) {
  // The thread starts with the first item: a stream refused before its first file never
  // starts it.
  if (!thread_.joinable()) thread_ = std::thread(&DigestCheck::Run, this);
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    queued_bytes_ += item.size;
    queued_.push_back(std::move(item));
    // Woken for a batch, not for each piece: when a megabyte waits, or half the buffers do.
    size_t available = free_.size() + (max_buffers_ - buffers_.size());
    wake = hasher_waiting_ && (queued_bytes_ >= kWakeBytes || 2 * available < max_buffers_);
    if (wake) queued_bytes_ = 0;
  }
  if (wake) work_.notify_one();
}

void DigestCheck::Hash(Buffer* buffer, size_t size) { Queue(Item{buffer, size, {}, {}, {}}); }

void DigestCheck::WriteFile(UniqueFd file, std::string path) {
  Queue(Item{nullptr, 0, std::move(path), {}, std::move(file)});
}

void DigestCheck::EndFile(std::string name, std::string sha256) {
  Queue(Item{nullptr, 0, std::move(name), std::move(sha256), {}});
}

std::optional<std::string> DigestCheck::Finish() {
  std::unique_lock lock(mu_);
  if (hasher_waiting_) work_.notify_one();
  receiver_waiting_ = true;
  done_.wait(lock, [this]() REQUIRES(mu_) { return queued_.empty() && !busy_; });
  receiver_waiting_ = false;
  return differed_;
}

Status DigestCheck::Written() {
  std::lock_guard lock(mu_);
  return written_;
}

void DigestCheck::WritePiece(Writing* writing, std::string_view piece) {
  if (!writing->file.valid() || writing->failed) return;
  Status status = WriteAll(writing->file.get(), piece, writing->path);
  if (status.ok()) return;
  writing->failed = true;
  write_failed_.store(true, std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  if (written_.ok() && !differed_) written_ = std::move(status);
}

void DigestCheck::Run() {
  Sha256 file;
  Writing writing;
  std::vector<Item> items;
  std::unique_lock lock(mu_);
  for (;;) {
    hasher_waiting_ = true;
    work_.wait(lock, [this]() REQUIRES(mu_) { return !queued_.empty() || stopping_; });
    hasher_waiting_ = false;
    if (stopping_) return;
    items.swap(queued_);
    queued_bytes_ = 0;
    busy_ = true;
    lock.unlock();
    for (size_t i = 0; i < items.size(); ++i) {
      Item& item = items[i];
      if (item.buffer != nullptr) {
        std::string_view piece(item.buffer->data(), item.size);
        WritePiece(&writing, piece);
        file.Update(piece);
      } else if (item.file.valid()) {
        writing = Writing{std::move(item.file), std::move(item.name)};
      } else {
        if (file.FinishHex() != item.sha256) {
          std::lock_guard relock(mu_);
          if (!differed_ && written_.ok()) differed_ = std::move(item.name);
        }
        file.Reset();
        writing = Writing();  // closes the file written
      }
      bool last = i + 1 == items.size();
      if (item.buffer != nullptr || last) {
        // Each buffer goes back as soon as it is hashed: the receiver may be waiting for one.
        std::lock_guard relock(mu_);
        if (item.buffer != nullptr) free_.push_back(item.buffer);
        if (last) busy_ = false;
        if (receiver_waiting_) done_.notify_one();
      }
    }
    items.clear();
    lock.lock();
  }
}

}  // namespace capsule::move
