// Digests of files that are never rewritten (a capsule's content-addressed blobs), remembered
// by the identity stat(2) gives them, so that a process re-verifying a capsule it serves reads
// again only the blobs placed since it last looked.
//
// A remembered digest is used only while the file's device, inode, size, modification time
// and change time are all as they were when it was hashed; any write, truncate, rename over
// it or chmod changes one of them, and the file is read again. It does not catch damage that
// bypasses the file system (bit rot): a cold `capsule verify` does.
//
// `Remembered` answers without looking at the file at all: for a caller that knows nothing
// but itself writes the folder and that it never rewrites a blob (a mount's freeze right after
// its preverify).
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "capsule/base/mutex.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/status.h"

namespace capsule {

class DigestCache {
 public:
  // The SHA-256 (hex) of the file at `path` and its size, from memory when its identity is
  // unchanged, else read and remembered.
  Result<std::string> Sha256File(const std::string& path, uint64_t* size_out);
  // The same for a file just listed (ListTree): its identity is taken from `listed` instead of
  // a stat of its own.
  Result<std::string> Sha256File(const std::string& path, const TreeEntry& listed, uint64_t* size_out);

  // The same for the file open as `fd`, remembered as `path` (its identity from fstat(2)): for
  // a caller that opened it without following a link (DirFd::OpenFile).
  Result<std::string> Sha256Opened(int fd, const std::string& path, uint64_t* size_out);
  Result<std::string> Sha256Opened(int fd, const std::string& path, const TreeEntry& listed, uint64_t* size_out);

  // The digest and size remembered for `path` when it was last hashed, without a stat: the
  // caller vouches that nothing has written the file since. nullopt when not remembered.
  struct Digest {
    std::string sha256;
    uint64_t size = 0;
  };
  std::optional<Digest> Remembered(const std::string& path) const;

  // For a file of lines that only grows (the journal: its torn last line may be cut, nothing
  // before), in a folder only the caller writes: its SHA-256 and size, and the digest of its
  // first `prefix_length` bytes in `*prefix_hex` (when given; empty when the file is
  // shorter), reading only what lies past the part it hashed before (the hash's state at that
  // length is kept, when it ended a line). That part counts as unchanged while the file keeps
  // its device and inode, is no shorter, and still ends with the same last 4 KiB; otherwise,
  // or when the prefix asked for is shorter than that part, the file is read whole.
  Result<std::string> Sha256GrowingFile(const std::string& path, uint64_t prefix_length, std::string* prefix_hex,
                                        uint64_t* size_out);

  // The same for the file open as `fd`, remembered as `path`.
  Result<std::string> Sha256GrowingOpened(int fd, const std::string& path, uint64_t prefix_length,
                                          std::string* prefix_hex, uint64_t* size_out);

  // How many files were read (not answered from memory) since the cache was made.
  uint64_t files_read() const;
  // How many bytes Sha256GrowingFile read since the cache was made.
  uint64_t growing_bytes_read() const;

  // Forgets every path not in `paths` (files that are gone), so that the cache does not grow
  // with every blob a long-lived process ever saw.
  void KeepOnly(const std::set<std::string>& paths);

 private:
  struct Identity {
    uint64_t device = 0, inode = 0, size = 0;
    int64_t mtime_ns = 0, ctime_ns = 0;
    bool operator==(const Identity&) const = default;
  };
  struct Entry {
    Identity identity;
    std::string sha256;
  };
  static Identity IdentityOf(const struct stat& st);
  static Identity IdentityOf(const TreeEntry& listed);
  // `fd` open on `path`, `before` its identity as listed or as fstat gave it.
  Result<std::string> Sha256FileAs(int fd, const std::string& path, const Identity& before, uint64_t* size_out);

  struct Grown {  // a growing file as it was hashed up to `size`
    uint64_t device = 0, inode = 0, size = 0;
    std::string tail;  // its last bytes before `size`, up to 4 KiB
    std::shared_ptr<const Sha256> state;
  };

  mutable Mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // by path
  std::unordered_map<std::string, Grown> grown_;    // by path
  uint64_t files_read_ = 0;
  uint64_t growing_bytes_read_ = 0;
};

}  // namespace capsule
