#include "move/byte_pipe.h"

#include <algorithm>
#include <cstring>

namespace capsule::move {

Status BytePipe::Write(std::string_view data) {
  while (!data.empty()) {
    std::unique_lock lock(mu_);
    changed_.wait(lock, [&] { return read_closed_ || buffer_.size() - offset_ < capacity_; });
    if (read_closed_) return Status::Unavailable("stream", "the receiving side stopped reading");
    // What was read is dropped before the buffer grows past twice the capacity: a writer that
    // keeps ahead of its reader never lets the buffer empty, and appending alone would keep
    // the whole stream (each byte is moved at most once: only after a capacity's worth was read).
    if (offset_ >= capacity_ || offset_ == buffer_.size()) {
      buffer_.erase(0, offset_);
      offset_ = 0;
    }
    size_t room = capacity_ - (buffer_.size() - offset_);
    size_t n = std::min(room, data.size());
    buffer_.append(data.substr(0, n));
    data.remove_prefix(n);
    changed_.notify_all();
  }
  return Status::Ok();
}

Result<size_t> BytePipe::Read(char* buffer, size_t size) {
  std::unique_lock lock(mu_);
  changed_.wait(lock, [&] { return write_closed_ || offset_ < buffer_.size(); });
  if (offset_ < buffer_.size()) {
    size_t n = std::min(size, buffer_.size() - offset_);
    std::memcpy(buffer, buffer_.data() + offset_, n);
    offset_ += n;
    if (offset_ == buffer_.size()) {
      buffer_.clear();
      offset_ = 0;
    }
    changed_.notify_all();
    return n;
  }
  if (!write_status_.ok()) return write_status_;
  return size_t{0};
}

void BytePipe::CloseWrite(Status status) {
  std::lock_guard lock(mu_);
  if (write_closed_) return;
  write_closed_ = true;
  write_status_ = std::move(status);
  changed_.notify_all();
}

size_t BytePipe::allocated() {
  std::lock_guard lock(mu_);
  return buffer_.capacity();
}

void BytePipe::CloseRead() {
  std::lock_guard lock(mu_);
  read_closed_ = true;
  changed_.notify_all();
}

}  // namespace capsule::move
