#include "capsule/base/read_ahead.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <utility>

namespace capsule {

bool CanReadAhead(int fd) {
  struct stat st;
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
}

ReadAhead::ReadAhead(ByteSource* source, size_t block_size, size_t blocks)
    : source_(source), block_size_(std::max<size_t>(block_size, 1)), blocks_(std::max<size_t>(blocks, 1)) {}

ReadAhead::~ReadAhead() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ReadAhead::Run() {
  size_t made = 0;
  for (;;) {
    Block block;
    {
      std::unique_lock lock(mu_);
      changed_.wait(lock, [&]() REQUIRES(mu_) { return stop_ || !free_.empty() || made < blocks_; });
      if (stop_) return;
      if (!free_.empty()) {
        block = std::move(free_.back());
        free_.pop_back();
      } else {
        ++made;
      }
    }
    block.bytes.resize(block_size_);
    // A block is filled as far as the source gives at once, so that a slow source (a pipe, a
    // socket) hands on what it has without waiting for a whole block.
    Result<size_t> n = source_->Read(block.bytes.data(), block.bytes.size());
    std::lock_guard lock(mu_);
    if (!n.ok() || *n == 0) {
      if (!n.ok()) error_ = n.status();
      ended_ = true;
      changed_.notify_all();
      return;
    }
    block.size = *n;
    full_.push_back(std::move(block));
    changed_.notify_all();
  }
}

Result<std::string_view> ReadAhead::Next() {
  std::unique_lock lock(mu_);
  if (!started_) {
    started_ = true;
    thread_ = std::thread([this] { Run(); });
  }
  if (!current_.bytes.empty()) {
    free_.push_back(std::move(current_));  // the consumer is done with it
    current_ = Block();
    changed_.notify_all();
  }
  offset_ = 0;
  changed_.wait(lock, [&]() REQUIRES(mu_) { return !full_.empty() || ended_; });
  if (full_.empty()) {
    if (!error_.ok()) return error_;
    return std::string_view();
  }
  current_ = std::move(full_.front());
  full_.pop_front();
  return std::string_view(current_.bytes.data(), current_.size);
}

Result<size_t> ReadAhead::Read(char* buffer, size_t size) {
  if (size == 0) return size_t{0};
  if (offset_ == current_.size) {
    CAPSULE_ASSIGN_OR_RETURN(std::string_view next, Next());
    if (next.empty()) return size_t{0};
  }
  size_t n = std::min(size, current_.size - offset_);
  std::memcpy(buffer, current_.bytes.data() + offset_, n);
  offset_ += n;
  return n;
}

}  // namespace capsule
