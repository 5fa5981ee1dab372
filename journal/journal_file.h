// Low-level pieces of the journal file shared by Journal's writers (internal to journal/):
// the writers' lock, the torn-tail repair, and the tail cache in .capsule/journal.tail.
//
// Thread-safety: JournalLock is a single-owner RAII object; the functions are safe from any
// thread as long as the caller holds the lock when it changes the journal.
#pragma once

#include <cstdint>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "journal/check.h"

namespace capsule::journal {

// Holds flock(LOCK_EX) on `fd` for its lifetime.
class JournalLock {
 public:
  static Result<JournalLock> Acquire(int fd);
  JournalLock(JournalLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  JournalLock& operator=(JournalLock&&) = delete;
  ~JournalLock();

 private:
  explicit JournalLock(int fd) : fd_(fd) {}
  int fd_;
};

// Cuts a last line without its newline off the open journal `fd` (ftruncate to just after
// the last newline, then fdatasync). Returns the journal's size afterwards.
Result<uint64_t> CutTornTail(int fd, const std::string& path);

// The last line of a journal of `size` bytes read through `read` (errors naming `name`),
// without its newline; empty for an empty journal. A final newline ends the line; without
// one the line runs to `size`. It reads backward from the end in blocks that double from
// `first_block` to 4 MiB, each into the same buffer, looking only for the newline before the
// line, then reads the line once: at most three times the line's length and a block in all,
// whatever that length (a journal written before kMaxEventLineBytes may hold a longer line).
inline constexpr size_t kLastLineFirstBlock = 64 << 10;
Result<std::string> ReadLastLine(const ReadAtFunction& read, uint64_t size, const std::string& name,
                                 size_t first_block = kLastLineFirstBlock);

// What the tail cache records: the journal it describes and that journal's tail.
struct TailCache {
  uint64_t inode = 0;
  uint64_t size = 0;
  uint64_t last_line_length = 0;  // with its newline
  std::string last_line_sha256;
  JournalTail tail;
};

// The tail of the journal open at `fd` (size `size`, no torn tail): from the cache when it
// matches the file, otherwise by reading and checking the whole journal.
Result<JournalTail> LoadJournalTail(const std::string& capsule_dir, int fd, uint64_t size);

// Records `tail` as the tail of the journal open at `fd`, whose last line is `last_line`
// (with its newline). Not synced: a stale or torn cache is detected and ignored.
Status SaveJournalTail(const std::string& capsule_dir, int fd, const std::string& last_line,
                       const JournalTail& tail);

// Writes `cache` over the tail cache open at `tail_fd` (kept open by a Journal), in one
// pwrite(2): a longer older text left behind it is ignored by the reader.
Status WriteTailCache(int tail_fd, const TailCache& cache);

}  // namespace capsule::journal
