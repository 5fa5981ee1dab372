// Checking files against their digests on a thread of its own, while they are written or
// sent: the caller reads each piece of a file into a buffer taken from here, writes or sends
// it, and hands it back to be hashed; when the file ends, it hands over the digest the file
// must have. Hashing then costs the caller no time of its own (on two cores or more). The
// receiver checks what it writes; a pack checks that what it sends is still what the
// snapshot says (a move's source, whose target checks, only for files outside the blobs).
//
// A receiver may also leave the writing to the checking thread (WriteFile): each piece is
// then written to the file before it is hashed, so that receiving the next piece (a TLS
// record decrypted, a tar header parsed) overlaps copying this one into the page cache.
//
// A file whose digest differs is known only once its pieces are hashed: the caller must call
// Finish before it uses what it wrote (a staging folder is refused whole) or ends what it
// sends (a stream without its end is refused whole). Likewise a write that failed; the first
// fault in the files' order is the one kept, a digest that differs or a write that failed.
//
// Thread-safety: one caller thread calls everything; the hashing thread is internal, and
// starts with the first piece or file handed over.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <cstddef>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/status.h"

namespace capsule::move {

class DigestCheck {
 public:
  class Buffer {
   public:
    explicit Buffer(size_t size) : bytes_(new char[size]), size_(size) {}  // not zeroed
    char* data() { return bytes_.get(); }
    size_t size() const { return size_; }

   private:
    std::unique_ptr<char[]> bytes_;
    size_t size_;
  };

  // Up to `buffers` buffers of `buffer_size` bytes, made as they are first needed (a small
  // stream touches little memory): the hashing thread lags at most that far.
  explicit DigestCheck(size_t buffers = 16, size_t buffer_size = 1 << 20);
  ~DigestCheck();  // stops the hashing thread, whatever is left
  DigestCheck(const DigestCheck&) = delete;
  DigestCheck& operator=(const DigestCheck&) = delete;

  // A buffer to read the next piece into; waits while every buffer is queued to be hashed.
  Buffer* Take();
  // The first `size` bytes of `buffer` are the next piece of the current file.
  void Hash(Buffer* buffer, size_t size);
  // Gives back a buffer taken but not handed to Hash.
  void Give(Buffer* buffer);
  // The pieces handed to Hash from here to the next EndFile are written to `file` (a new,
  // empty file open for writing, named `path` in errors), in order, before they are hashed;
  // EndFile closes it. A file held open here holds a buffer until it ends (its pieces do),
  // except an empty one: the caller closes an empty file itself, so that a run of empty
  // files keeps no descriptors open.
  void WriteFile(UniqueFd file, std::string path);
  // The current file ended: its pieces must have the digest `sha256` (lowercase hex). The next
  // piece begins the next file.
  void EndFile(std::string name, std::string sha256);
  // Waits until every piece is hashed (and written). The name of the first file whose digest
  // differed, if one did and no write failed before it.
  std::optional<std::string> Finish();
  // The first write that failed (after Finish: of them all), if no digest differed before it;
  // Ok otherwise.
  Status Written();
  // Whether a write has failed: cheap enough to ask for every piece.
  bool WriteFailed() const { return write_failed_.load(std::memory_order_relaxed); }

 private:
  struct Item {
    Buffer* buffer = nullptr;  // a piece; when null, the end of a file, or with `file`, its start
    size_t size = 0;
    std::string name, sha256;
    UniqueFd file;  // where the file's pieces are written (WriteFile)
  };
  // The file being written on the hashing thread, if any.
  struct Writing {
    UniqueFd file;
    std::string path;
    bool failed = false;
  };
  // Writes a piece into `writing`, a failure kept in written_ when it is the first fault.
  void WritePiece(Writing* writing, std::string_view piece);
  void Run();

  void Queue(Item item);

  const size_t max_buffers_, buffer_size_;
  std::vector<std::unique_ptr<Buffer>> buffers_ GUARDED_BY(mu_);  // every buffer made
  std::thread thread_;
  Mutex mu_;
  // Each side is woken only when it waits: on this VM a wake-up costs a context switch.
  std::condition_variable work_;           // the hashing thread waits here for items
  std::condition_variable done_;           // the receiver waits here for a buffer, or the end
  bool hasher_waiting_ GUARDED_BY(mu_) = false;
  bool receiver_waiting_ GUARDED_BY(mu_) = false;
  std::vector<Buffer*> free_ GUARDED_BY(mu_);
  std::vector<Item> queued_ GUARDED_BY(mu_);  // the hashing thread takes them all at once
  size_t queued_bytes_ GUARDED_BY(mu_) = 0;  // queued since the hashing thread was woken
  static constexpr size_t kWakeBytes = 1 << 20;
  bool busy_ GUARDED_BY(mu_) = false;  // the hashing thread holds items
  bool stopping_ GUARDED_BY(mu_) = false;
  std::optional<std::string> differed_ GUARDED_BY(mu_);  // the first file whose digest differed
  Status written_ GUARDED_BY(mu_);  // the first write that failed, if the first fault
  std::atomic<bool> write_failed_{false};
};

}  // namespace capsule::move
