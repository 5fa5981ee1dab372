#include "move/stream/digest_check.h"

namespace capsule::move {

DigestCheck::DigestCheck(size_t buffers, size_t buffer_size) : buffers_(buffers) {
  for (Buffer& buffer : buffers_) {
    buffer.bytes.resize(buffer_size);
    free_.push_back(&buffer);
  }
  thread_ = std::thread(&DigestCheck::Run, this);
}

DigestCheck::~DigestCheck() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

DigestCheck::Buffer* DigestCheck::Take() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return !free_.empty(); });
  Buffer* buffer = free_.back();
  free_.pop_back();
  return buffer;
}

void DigestCheck::Give(Buffer* buffer) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(buffer);
  }
  changed_.notify_all();
}

void DigestCheck::Hash(Buffer* buffer, size_t size) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.push_back(Item{buffer, size, {}, {}});
  }
  changed_.notify_all();
}

void DigestCheck::EndFile(std::string name, std::string sha256) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queued_.push_back(Item{nullptr, 0, std::move(name), std::move(sha256)});
  }
  changed_.notify_all();
}

std::optional<std::string> DigestCheck::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait(lock, [this] { return queued_.empty() && !busy_; });
  return differed_;
}

void DigestCheck::Run() {
  Sha256 file;
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    changed_.wait(lock, [this] { return !queued_.empty() || stopping_; });
    if (stopping_) return;
    Item item = std::move(queued_.front());
    queued_.pop_front();
    busy_ = true;
    lock.unlock();
    std::optional<std::string> differed;
    if (item.buffer != nullptr) {
      file.Update(std::string_view(item.buffer->bytes.data(), item.size));
    } else {
      if (file.FinishHex() != item.sha256) differed = std::move(item.name);
      file.Reset();
    }
    lock.lock();
    busy_ = false;
    if (item.buffer != nullptr) free_.push_back(item.buffer);
    if (differed && !differed_) differed_ = std::move(differed);
    changed_.notify_all();
  }
}

}  // namespace capsule::move
