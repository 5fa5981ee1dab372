// A bounded in-memory pipe between two threads: one writes a stream (a pack), the other
// reads it (a call that sends it), so that a move never holds a whole stream in memory.
//
// Either end may give up: CloseRead makes every later Write fail (the reader is gone), and
// a writer that fails calls CloseWrite with its error, which the reader then gets instead of
// the end. Thread-safe between one writer and one reader.
#pragma once

#include <condition_variable>
#include <mutex>
#include <string>

#include "capsule/base/mutex.h"
#include "capsule/base/byte_stream.h"
#include "capsule/base/status.h"

namespace capsule::move {

class BytePipe {
 public:
  explicit BytePipe(size_t capacity = 4 << 20) : capacity_(capacity) { buffer_.reserve(2 * capacity); }

  class Sink : public ByteSink {
   public:
    explicit Sink(BytePipe* pipe) : pipe_(pipe) {}
    Status Write(std::string_view data) override { return pipe_->Write(data); }
    Status Close() override {
      pipe_->CloseWrite(Status::Ok());
      return Status::Ok();
    }

   private:
    BytePipe* pipe_;
  };

  class Source : public ByteSource {
   public:
    explicit Source(BytePipe* pipe) : pipe_(pipe) {}
    Result<size_t> Read(char* buffer, size_t size) override { return pipe_->Read(buffer, size); }

   private:
    BytePipe* pipe_;
  };

  Status Write(std::string_view data);
  Result<size_t> Read(char* buffer, size_t size);
  // The writer is done: `status` ok for the end, or why it stopped.
  void CloseWrite(Status status);
  // The reader is done: the writer's next Write fails.
  void CloseRead();
  // The memory the pipe's buffer holds: twice its capacity, whatever went through it.
  size_t allocated();

 private:
  Mutex mu_;
  std::condition_variable changed_;
  std::string buffer_;
  size_t offset_ = 0;
  size_t capacity_;
  bool write_closed_ = false;
  Status write_status_;
  bool read_closed_ = false;
};

}  // namespace capsule::move
