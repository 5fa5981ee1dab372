// Where bytes go to and come from, so that tar, the Move Stream and the sealed envelope can
// stream into files, sockets or each other in constant memory.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

class ByteSink {
 public:
  virtual ~ByteSink() = default;
  virtual Status Write(std::string_view data) = 0;
  // Called once after the last Write: flush what is buffered.
  virtual Status Close() { return Status::Ok(); }
};

class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Reads up to `size` bytes; 0 only at the end.
  virtual Result<size_t> Read(char* buffer, size_t size) = 0;
};

// Reads exactly `size` bytes; Corruption "cut short" naming `what` when the source ends first.
Status ReadExactly(ByteSource* source, char* buffer, size_t size, const std::string& what);

// A sink or source on a file descriptor it does not own.
class FdSink : public ByteSink {
 public:
  FdSink(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  Status Write(std::string_view data) override;

 private:
  int fd_;
  std::string name_;
};

class FdSource : public ByteSource {
 public:
  FdSource(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  Result<size_t> Read(char* buffer, size_t size) override;

 private:
  int fd_;
  std::string name_;
};

// In memory, for tests and small documents.
class StringSink : public ByteSink {
 public:
  Status Write(std::string_view data) override {
    data_.append(data);
    return Status::Ok();
  }
  const std::string& data() const { return data_; }

 private:
  std::string data_;
};

class StringSource : public ByteSource {
 public:
  explicit StringSource(std::string data) : data_(std::move(data)) {}
  Result<size_t> Read(char* buffer, size_t size) override;

 private:
  std::string data_;
  size_t offset_ = 0;
};

}  // namespace capsule
