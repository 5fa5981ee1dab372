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

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "fs/running_hash.h"

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
  Mutex wc_mu;
  std::set<Handle*> writers;
  std::unique_ptr<WorkingCopy> wc;  // a pointer: most nodes never have one
  uint64_t commits = 0;
  // The kernel's page cache of a workspace file: every write reaches it on its way to us, so
  // it stays the file's content unless the driver's content parts from what those writes made
  // (writes dropped without a commit), which bumps `content_resets`. `cache_filled_at`: that
  // count at the last open. An open keeps the kernel's cache (FOPEN_KEEP_CACHE) while the two
  // agree; otherwise the kernel drops it. A file renamed over, or another mount's, is another
  // inode with a cache of its own.
  uint64_t content_resets = 0;
  uint64_t cache_filled_at = ~0ull;
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
