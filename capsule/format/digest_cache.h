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

#include <cstdint>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>

#include "capsule/base/file_io.h"
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

  // The digest and size remembered for `path` when it was last hashed, without a stat: the
  // caller vouches that nothing has written the file since. nullopt when not remembered.
  struct Digest {
    std::string sha256;
    uint64_t size = 0;
  };
  std::optional<Digest> Remembered(const std::string& path) const;

  // How many files were read (not answered from memory) since the cache was made.
  uint64_t files_read() const;

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
  static Result<Identity> IdentityOf(const std::string& path);
  static Identity IdentityOf(const TreeEntry& listed);
  Result<std::string> Sha256FileAs(const std::string& path, const Identity& before, uint64_t* size_out);

  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;  // by path
  uint64_t files_read_ = 0;
};

}  // namespace capsule
