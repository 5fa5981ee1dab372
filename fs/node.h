// One inode of the mount. The tree of nodes is the view: virtual folders (the root,
// artifacts/), rendered documents (manifest.json, artifacts/snapshot.json), the control file,
// real capsule files and folders (memory/, environment/, schedule/, artifacts/blobs/, looked up
// lazily on disk), and the workspace (files/, held in memory from the snapshot and the change
// log; file bodies are blobs).
//
// Locking: see capsule_fs.h for the order. Fields are marked with the mutex that guards them.
#pragma once

#include <fuse3/fuse_lowlevel.h>
#include <sys/stat.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"

namespace capsule::fs {

enum class NodeKind {
  kVirtualDir,  // root, artifacts/
  kRendered,    // manifest.json, artifacts/snapshot.json
  kControl,     // .capsulefs-control: the control socket's path
  kRealDir,     // a folder of the capsule on disk
  kRealFile,    // a file of the capsule on disk
  kWsDir,       // files/ and folders under it
  kWsFile,      // a workspace file: a blob
  kWsLink,      // a workspace symbolic link
  kWsSpecial,   // a workspace FIFO, socket or device node: metadata only (the kernel serves it)
};

enum class Document { kNone, kManifest, kSnapshot };

struct Handle;
struct Node;

class RunningHash;

// A write's bytes owed to its file's running digest: hashed by Run, or on destruction, so
// that no queued write is ever left out (RunningHash::FinishHex waits for each). The bytes
// must live until then (a FUSE request's buffer lives until its handler returns). Running
// waits for every earlier write of the file to be hashed: one thread must not hold a later
// write's record while it owes an earlier one (each FUSE request owes its own write only).
class DeferredHash {
 public:
  DeferredHash() = default;
  DeferredHash(std::shared_ptr<RunningHash> hash, uint64_t offset, std::string_view bytes)
      : hash_(std::move(hash)), offset_(offset), bytes_(bytes) {}
  DeferredHash(DeferredHash&& other) noexcept
      : hash_(std::move(other.hash_)), offset_(other.offset_), bytes_(other.bytes_) {}
  // No assignment: a record replaced would be hashed on the spot, perhaps before an earlier
  // write it must wait for and that this same thread owes.
  DeferredHash& operator=(DeferredHash&&) = delete;
  ~DeferredHash() { Run(); }
  void Run();

 private:
  std::shared_ptr<RunningHash> hash_;
  uint64_t offset_ = 0;
  std::string_view bytes_;
};

// The digest of a working copy written in order from its start, kept beside the writes. A
// write is answered first and hashed after, so that hashing one write overlaps the transfer
// of the next: writes are queued in file order under the node's wc_mu, and hashed in that
// order whichever threads run them.
class RunningHash {
 public:
  // Guarded by the node's wc_mu: bytes [0, queued()) are written, and each write among them
  // is hashed or will be.
  uint64_t queued() const { return queued_; }
  // Under wc_mu: the `bytes` just written at `offset` == queued() join the digest; the caller
  // hashes them, outside wc_mu, through what is returned.
  static DeferredHash Queue(const std::shared_ptr<RunningHash>& hash, uint64_t offset, std::string_view bytes) {
    hash->queued_ = offset + bytes.size();
    return DeferredHash(hash, offset, bytes);
  }
  // Under wc_mu: waits until every queued write is hashed; the digest of bytes [0, queued()).
  std::string FinishHex() {
    std::unique_lock lock(mu_);
    turn_.wait(lock, [&] { return hashed_ == queued_; });
    return sha_.FinishHex();
  }

 private:
  friend class DeferredHash;
  // Adds `bytes`, once the bytes before `offset` are in.
  void Hash(uint64_t offset, std::string_view bytes) {
    std::unique_lock lock(mu_);
    turn_.wait(lock, [&] { return hashed_ == offset; });
    sha_.Update(bytes);
    hashed_ += bytes.size();
    turn_.notify_all();
  }

  uint64_t queued_ = 0;
  std::mutex mu_;
  std::condition_variable turn_;
  Sha256 sha_;           // guarded by mu_
  uint64_t hashed_ = 0;  // guarded by mu_: bytes [0, hashed_) are in sha_
};

inline void DeferredHash::Run() {
  if (!hash_) return;
  hash_->Hash(offset_, bytes_);
  hash_.reset();
}

// The file as its writers have made it so far: one per file, shared by every open of it, so
// that each open sees the writes at once (POSIX, as ext4 has it). It replaces the committed
// content whole at a commit (a writer's close, fsync, freeze, unmount); a crash before that
// leaves the file as it was at its last commit.
struct WorkingCopy {
  std::string path;  // in DIR/.capsule/work/
  UniqueFd fd;
  uint64_t size = 0;
  bool dirty = false;
  // While the file has been written in order from its start: the digest of what is written.
  std::shared_ptr<RunningHash> hash;
  // When the content last changed (or the time utimens set): the file's mtime once committed.
  struct timespec mtime {};
};

// A folder's entries by name, counting those that are folders: a folder's link count is two
// plus that count, and a stat must not walk the entries to learn it.
class Children {
 public:
  using Map = std::map<std::string, std::shared_ptr<Node>>;
  using const_iterator = Map::const_iterator;

  const_iterator begin() const { return map_.begin(); }
  const_iterator end() const { return map_.end(); }
  const_iterator find(const std::string& name) const { return map_.find(name); }
  size_t count(const std::string& name) const { return map_.count(name); }
  bool empty() const { return map_.empty(); }
  size_t folders() const { return folders_; }

  // Gives `name` to `node`, in place of whatever had it.
  void Put(const std::string& name, std::shared_ptr<Node> node);
  void Erase(const std::string& name);
  const_iterator Erase(const_iterator it);

 private:
  Map map_;
  size_t folders_ = 0;
};

// A name of a node beyond its first (hard links).
struct NodeLink {
  Node* dir;
  std::string name;
};

struct Node {
  Node(fuse_ino_t ino_in, NodeKind kind_in) : ino(ino_in), kind(kind_in) {}

  const fuse_ino_t ino;
  const NodeKind kind;
  Document document = Document::kNone;

  // Guarded by CapsuleFs::tree_mu_.
  // Its first name; null once it has none left (and for the root). A workspace node that is
  // not a folder may have more names (hard links): `other_links`, all in one `link_group`.
  Node* parent = nullptr;
  std::string name;
  std::vector<NodeLink> other_links;
  uint64_t link_group = 0;  // the snapshot's `link`, while it has two names or more
  Children children;
  uint64_t nlookup = 0;
  mode_t mode = 0;  // permission bits (workspace nodes)
  // Owner (workspace nodes); absent: whoever mounts the capsule (the driver's user).
  std::optional<uint32_t> uid, gid;
  struct timespec mtime {};
  struct timespec ctime {};  // when its attributes last changed; {} means as mtime
  std::optional<struct timespec> atime;  // as utimensat(2) set it (reads do not move it); else mtime
  std::string sha256;  // kWsFile: committed content
  uint64_t size = 0;   // kWsFile: committed size
  std::string target;  // kWsLink
  mode_t special = 0;  // kWsSpecial: S_IFIFO, S_IFSOCK, S_IFCHR or S_IFBLK
  dev_t rdev = 0;      // kWsSpecial devices

  // Guarded by wc_mu: the writer handles of this node, its working copy while it has one, and
  // how many commits it has had (a reader holding the committed file opens it again when the
  // count moved on).
  std::mutex wc_mu;
  std::set<Handle*> writers;
  std::optional<WorkingCopy> wc;
  uint64_t commits = 0;
};

bool IsDirKind(NodeKind kind);

inline void Children::Put(const std::string& name, std::shared_ptr<Node> node) {
  folders_ += IsDirKind(node->kind) ? 1 : 0;
  auto [it, inserted] = map_.try_emplace(name, std::move(node));
  if (inserted) return;
  folders_ -= IsDirKind(it->second->kind) ? 1 : 0;
  it->second = std::move(node);
}

inline Children::const_iterator Children::Erase(const_iterator it) {
  folders_ -= IsDirKind(it->second->kind) ? 1 : 0;
  return map_.erase(it);
}

inline void Children::Erase(const std::string& name) {
  auto it = map_.find(name);
  if (it != map_.end()) Erase(it);
}

// The later of two times.
inline struct timespec Later(const struct timespec& a, const struct timespec& b) {
  return (a.tv_sec != b.tv_sec ? a.tv_sec > b.tv_sec : a.tv_nsec > b.tv_nsec) ? a : b;
}

}  // namespace capsule::fs
