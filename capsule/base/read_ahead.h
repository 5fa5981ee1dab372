// Reading a source ahead on a thread of its own, so that what consumes it (sealing, opening)
// overlaps the reading: the source is read in blocks into a few buffers while the consumer
// works on the blocks read before.
//
// Thread-safety: one consumer; the source is read only by the reading thread, from the first
// call on until the end, an error, or destruction (which stops the reading and waits for it).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/byte_stream.h"
#include "capsule/base/status.h"

namespace capsule {

// True when `fd` may be read ahead: a regular file, whose reads always end, so the reading
// thread can always be stopped (a thread blocked reading a pipe or a socket could not).
bool CanReadAhead(int fd);

class ReadAhead : public ByteSource {
 public:
  // Up to `blocks` blocks of up to `block_size` bytes are read before the consumer takes them.
  explicit ReadAhead(ByteSource* source, size_t block_size = 1 << 20, size_t blocks = 4);
  ~ReadAhead() override;
  ReadAhead(const ReadAhead&) = delete;
  ReadAhead& operator=(const ReadAhead&) = delete;

  // The next bytes of the source, empty at its end; valid until the next call. The source's
  // error, once the bytes read before it are taken.
  Result<std::string_view> Next();
  // ByteSource: copies from the blocks read ahead.
  Result<size_t> Read(char* buffer, size_t size) override;

 private:
  struct Block {
    std::vector<char> bytes;
    size_t size = 0;
  };
  void Run();

  ByteSource* const source_;
  const size_t block_size_;
  const size_t blocks_;
  Mutex mu_;
  std::condition_variable changed_;
  std::deque<Block> full_ GUARDED_BY(mu_);  // read, not yet taken, in order
  std::vector<Block> free_ GUARDED_BY(mu_);  // taken back, to read into again
  bool ended_ GUARDED_BY(mu_) = false;  // the source ended or failed
  Status error_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  Block current_;                  // the consumer's: the block Next last gave
  size_t offset_ = 0;              // Read's position in current_
  bool started_ = false;
  std::thread thread_;
};

}  // namespace capsule
