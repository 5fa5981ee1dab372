// The tree of nodes: building it from the snapshot, paths, attributes, rendering.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <ctime>
#include <algorithm>
#include <map>
#include <optional>

#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "fs/capsule_fs.h"
#include "fs/errno_map.h"

namespace capsule::fs {

bool IsDirKind(NodeKind kind) {
  return kind == NodeKind::kVirtualDir || kind == NodeKind::kRealDir || kind == NodeKind::kWsDir;
}

namespace {

struct timespec Now() {
  struct timespec now;
  clock_gettime(CLOCK_REALTIME, &now);
  return now;
}

}  // namespace

CapsuleFs::CapsuleFs(MountOptions options, MountState state)
    : options_(std::move(options)), gate_(state) {}

CapsuleFs::~CapsuleFs() {
  for (Handle* h : handles_) delete h;  // opens the kernel never released: the mount is gone
}

std::shared_ptr<Node> CapsuleFs::NewNode(NodeKind kind, Node* parent, const std::string& name, fuse_ino_t ino) {
  if (ino < 2 || nodes_.count(ino) != 0) ino = next_ino_++;
  auto node = std::make_shared<Node>(ino, kind);
  node->name = name;
  node->parent = parent;
  node->mtime = Now();
  node->mode = IsDirKind(kind) ? 0755 : 0644;
  nodes_[node->ino] = node;
  if (parent != nullptr) parent->children.Put(name, node);
  return node;
}

Result<Node*> CapsuleFs::NodeOf(fuse_ino_t ino, const std::string& name) {
  auto it = nodes_.find(ino);
  if (it == nodes_.end()) return FsError(ENOENT, name);
  return it->second.get();
}

std::shared_ptr<Node> CapsuleFs::Get(fuse_ino_t ino) {
  std::shared_lock lock(tree_mu_);
  auto it = nodes_.find(ino);
  return it == nodes_.end() ? nullptr : it->second;
}

std::string CapsuleFs::NameOf(const Node* node) {
  std::shared_lock lock(tree_mu_);
  return node->name;
}

std::string CapsuleFs::RelPath(const Node* node) const {
  std::string path;
  for (const Node* n = node; n != nullptr && n != root_.get(); n = n->parent) {
    path = path.empty() ? n->name : n->name + "/" + path;
  }
  return path;
}

std::string CapsuleFs::WsPath(const Node* node) const {
  std::string path;
  for (const Node* n = node; n != nullptr && n != files_.get(); n = n->parent) {
    path = path.empty() ? n->name : n->name + "/" + path;
  }
  return path;
}

std::string CapsuleFs::WsChildPath(const Node* dir, const std::string& name) const {
  return dir == files_.get() ? name : WsPath(dir) + "/" + name;
}

std::vector<std::string> CapsuleFs::WsPaths(const Node* node) const {
  std::vector<std::string> paths;
  if (node->parent == nullptr) return paths;
  paths.push_back(WsPath(node));
  for (const NodeLink& link : node->other_links) paths.push_back(WsChildPath(link.dir, link.name));
  return paths;
}

Status CapsuleFs::BuildTree(const Snapshot& snapshot, const WorkspaceTimes& times, const WorkspaceInodes& inodes) {
  std::unique_lock lock(tree_mu_);
  root_ = std::make_shared<Node>(FUSE_ROOT_ID, NodeKind::kVirtualDir);
  root_->mtime = Now();
  nodes_[FUSE_ROOT_ID] = root_;
  NewNode(NodeKind::kRendered, root_.get(), kManifestPath)->document = Document::kManifest;
  NewNode(NodeKind::kControl, root_.get(), kControlFileName);
  files_ = NewNode(NodeKind::kWsDir, root_.get(), "files");
  for (const char* real : {"memory", "environment", "schedule", "harness"}) NewNode(NodeKind::kRealDir, root_.get(), real);
  auto artifacts = NewNode(NodeKind::kVirtualDir, root_.get(), "artifacts");
  NewNode(NodeKind::kRendered, artifacts.get(), "snapshot.json")->document = Document::kSnapshot;
  NewNode(NodeKind::kRealDir, artifacts.get(), "blobs");
  // The numbers the last checkpoint kept are taken again; a new node's comes after them all.
  for (const auto& [path, record] : inodes) next_ino_ = std::max<fuse_ino_t>(next_ino_, record.ino + 1);
  auto kept = [&](const std::string& path) -> const InodeRecord* {
    auto it = inodes.find(path);
    return it == inodes.end() ? nullptr : &it->second;
  };
  auto keep_times = [](Node* node, const InodeRecord* record) {
    if (record == nullptr) return;
    node->ctime = record->ctime;
    node->atime = record->atime;
  };
  if (const InodeRecord* files = kept(""); files != nullptr) {
    keep_times(files_.get(), files);
    if (files->mtime) files_->mtime = *files->mtime;
  }
  // Workspace entries in path order, so that a folder comes before what it holds.
  std::map<uint64_t, Node*> link_groups;  // the first name of each hard-linked file
  for (const auto& [path, entry] : snapshot.entries()) {
    Node* parent = files_.get();
    size_t start = 0;
    for (size_t slash; (slash = path.find('/', start)) != std::string::npos; start = slash + 1) {
      std::string part = path.substr(start, slash - start);
      auto it = parent->children.find(part);
      if (it == parent->children.end()) {
        const InodeRecord* record = kept(path.substr(0, slash));
        parent = NewNode(NodeKind::kWsDir, parent, part, record ? record->ino : 0).get();  // implied folder
        keep_times(parent, record);
      } else if (it->second->kind != NodeKind::kWsDir) {
        return Status::Corruption(kSnapshotPath, "'" + path + "' lies under a non-folder");
      } else {
        parent = it->second.get();
      }
    }
    std::string leaf = path.substr(start);
    auto time = times.find(path);
    if (entry.link != 0) {  // a further name of a file already in the tree
      next_link_group_ = std::max(next_link_group_, entry.link + 1);
      auto group = link_groups.find(entry.link);
      if (group != link_groups.end() && parent->children.count(leaf) == 0) {
        Node* node = group->second;
        parent->children.Put(leaf, nodes_[node->ino]);
        node->other_links.push_back(NodeLink{parent, leaf});
        continue;
      }
    }
    if (parent->children.count(leaf) != 0) {
      Node* existing = parent->children.find(leaf)->second.get();
      if (entry.type == SnapshotEntry::Type::kDirectory) existing->mode = entry.mode;
      existing->uid = entry.uid;
      existing->gid = entry.gid;
      if (time != times.end()) existing->mtime = time->second;
      keep_times(existing, kept(path));
      continue;
    }
    NodeKind kind = entry.type == SnapshotEntry::Type::kFile        ? NodeKind::kWsFile
                    : entry.type == SnapshotEntry::Type::kDirectory ? NodeKind::kWsDir
                    : entry.type == SnapshotEntry::Type::kSymlink   ? NodeKind::kWsLink
                                                                    : NodeKind::kWsSpecial;
    const InodeRecord* record = kept(path);
    auto node = NewNode(kind, parent, leaf, record ? record->ino : 0);
    keep_times(node.get(), record);
    if (entry.link != 0) {
      node->link_group = entry.link;
      link_groups[entry.link] = node.get();
    }
    if (kind == NodeKind::kWsSpecial) {
      node->special = SnapshotTypeBits(entry.type);
      node->rdev = static_cast<dev_t>(entry.rdev);
    }
    node->mode = entry.mode;
    node->sha256 = entry.sha256;
    node->size = entry.size;
    node->target = entry.target;
    node->uid = entry.uid;
    node->gid = entry.gid;
    if (time != times.end()) node->mtime = time->second;
  }
  return Status::Ok();
}

SnapshotEntry CapsuleFs::EntryOf(const Node* node) const {
  SnapshotEntry entry;
  switch (node->kind) {
    case NodeKind::kWsFile:
      entry.type = SnapshotEntry::Type::kFile;
      entry.sha256 = node->sha256;
      entry.size = node->size;
      entry.mode = node->mode & 07777;
      break;
    case NodeKind::kWsLink:
      entry.type = SnapshotEntry::Type::kSymlink;
      entry.target = node->target;
      entry.mode = 0;
      break;
    case NodeKind::kWsSpecial:
      entry.type = S_ISFIFO(node->special)  ? SnapshotEntry::Type::kFifo
                   : S_ISSOCK(node->special) ? SnapshotEntry::Type::kSocket
                   : S_ISCHR(node->special)  ? SnapshotEntry::Type::kCharDevice
                                             : SnapshotEntry::Type::kBlockDevice;
      entry.mode = node->mode & 07777;
      if (S_ISCHR(node->special) || S_ISBLK(node->special)) entry.rdev = node->rdev;
      break;
    default:
      entry.type = SnapshotEntry::Type::kDirectory;
      entry.mode = node->mode & 07777;
      break;
  }
  entry.uid = node->uid;
  entry.gid = node->gid;
  if (!node->other_links.empty()) entry.link = node->link_group;
  return entry;
}

void CapsuleFs::Record(const Node* node, const std::string& path, WorkspaceChange* change) const {
  // Hinted at the end: a walk of the tree comes in path order but where a name sorts before
  // its folder's "/" ("a.c" beside the folder "a"), so nearly every insert is at the end.
  change->set.insert_or_assign(change->set.end(), path, EntryOf(node));
  change->times.insert_or_assign(change->times.end(), path, node->mtime);
}

bool Caller::InGroup(gid_t g) const {
  if (g == gid) return true;
  for (gid_t member : groups) {
    if (member == g) return true;
  }
  return false;
}

void CapsuleFs::SetNewOwner(Node* node, const Node* parent, const Caller& caller) const {
  uint32_t gid = caller.gid;
  if ((parent->mode & S_ISGID) != 0) {  // a setgid folder hands down its group (and, to a folder, the bit)
    gid = parent->gid.value_or(driver_gid_);
    if (node->kind == NodeKind::kWsDir) node->mode |= S_ISGID;
  }
  if (caller.uid != driver_uid_) node->uid = caller.uid;
  if (gid != driver_gid_) node->gid = gid;
}

void CapsuleFs::EntriesChanged(Node* dir, WorkspaceChange* change) {
  struct timespec now = Now();
  dir->mtime = now;
  dir->ctime = now;
  if (dir->kind == NodeKind::kWsDir && dir != files_.get()) change->times[WsPath(dir)] = now;
}

void CapsuleFs::RecordAllNames(const Node* node, WorkspaceChange* change) const {
  for (const std::string& path : WsPaths(node)) Record(node, path, change);
}

void CapsuleFs::AddSubtree(const Node* node, const std::string& path, WorkspaceChange* change) const {
  Record(node, path, change);
  for (const auto& [name, child] : node->children) AddSubtree(child.get(), path + "/" + name, change);
}

Snapshot CapsuleFs::SnapshotOf(WorkspaceChange whole) { return Snapshot(std::move(whole.set)); }

WorkspaceInodes CapsuleFs::InodeTable() const {
  WorkspaceInodes table;
  auto record = [](const Node* node) {
    return InodeRecord{node->ino, node->ctime, node->atime, std::nullopt};  // ctime {}: as mtime
  };
  InodeRecord files = record(files_.get());
  files.mtime = files_->mtime;
  table.emplace("", files);
  // Depth first, in path order: each folder's entries after it.
  std::vector<std::pair<const Node*, std::string>> stack;
  for (auto it = files_->children.begin(); it != files_->children.end(); ++it) stack.emplace_back(it->second.get(), it->first);
  while (!stack.empty()) {
    auto [node, path] = std::move(stack.back());
    stack.pop_back();
    table.emplace_hint(table.end(), path, record(node));
    for (const auto& [name, child] : node->children) stack.emplace_back(child.get(), path + "/" + name);
  }
  return table;
}

WorkspaceChange CapsuleFs::WholeWorkspace() const {
  WorkspaceChange all;
  for (const auto& [name, child] : files_->children) AddSubtree(child.get(), name, &all);
  return all;
}

Result<std::shared_ptr<Node>> CapsuleFs::Child(Node* parent, const std::string& name) {
  if (!IsDirKind(parent->kind)) return FsError(ENOTDIR, name);
  if (name.size() > NAME_MAX) return FsError(ENAMETOOLONG, name);
  if (parent != root_.get() && parent->parent == nullptr) return FsError(ENOENT, name);  // removed
  auto it = parent->children.find(name);
  if (parent->kind != NodeKind::kRealDir) {
    if (it == parent->children.end()) return FsError(ENOENT, name);
    return it->second;
  }
  std::string parent_rel = RelPath(parent);
  std::string rel = parent_rel.empty() ? name : parent_rel + "/" + name;
  // Looked at beneath the capsule folder held open: no link on the way is followed.
  Result<struct stat> found = IsTempDebris(name) ? Result<struct stat>(FsError(ENOENT, rel)) : folder_.Stat(rel);
  if (!found.ok() && found.status().code() != Code::kNotFound) return found.status();  // a link on the way, named
  if (!found.ok()) {
    if (it != parent->children.end()) {  // gone from the disk: forget it
      it->second->parent = nullptr;
      if (it->second->nlookup == 0) nodes_.erase(it->second->ino);
      parent->children.Erase(it);
    }
    return FsError(ENOENT, rel);
  }
  const struct stat& st = *found;
  NodeKind kind = S_ISDIR(st.st_mode) ? NodeKind::kRealDir : NodeKind::kRealFile;
  if (it != parent->children.end() && it->second->kind == kind) return it->second;
  if (it != parent->children.end()) it->second->parent = nullptr;
  return NewNode(kind, parent, name);
}

std::optional<CapsuleFs::LiveAttr> CapsuleFs::WrittenAttr(Node* node) {
  if (node->kind != NodeKind::kWsFile && node->kind != NodeKind::kRealFile) return std::nullopt;
  std::lock_guard wc_lock(node->wc_mu);
  if (!node->wc) return std::nullopt;
  return LiveAttr{node->wc->size, node->wc->mtime};
}

Result<struct stat> CapsuleFs::Attr(Node* node) {
  // A file open for writing is what its writer made of it: size and mtime come from the
  // working copy, so that fstat, stat and a setattr's reply (tar -x's futimens on the open
  // descriptor) see the writes at once. Taken before tree_mu_, as every wc_mu is.
  std::optional<LiveAttr> live = WrittenAttr(node);
  struct stat st {};
  st.st_ino = node->ino;
  st.st_uid = node->uid.value_or(driver_uid_);
  st.st_gid = node->gid.value_or(driver_gid_);
  st.st_blksize = 4096;
  st.st_nlink = 1;
  bool read_only_mount = gate_.state() == MountState::kReadOnly || gate_.state() == MountState::kRetired;
  std::shared_lock lock(tree_mu_);
  st.st_mtim = st.st_atim = st.st_ctim = node->mtime;
  if (node->ctime.tv_sec != 0 || node->ctime.tv_nsec != 0) st.st_ctim = node->ctime;
  if (node->atime) st.st_atim = *node->atime;
  // A folder's links: its entry, its '.', and each subfolder's '..'. A file unlinked while
  // still open has none.
  nlink_t subfolders = node->children.folders();
  bool unlinked = node->parent == nullptr && node != root_.get();
  switch (node->kind) {
    case NodeKind::kVirtualDir:
      st.st_mode = S_IFDIR | 0555;
      st.st_nlink = 2 + subfolders;
      break;
    case NodeKind::kRendered: {
      Document document = node->document;
      lock.unlock();
      CAPSULE_ASSIGN_OR_RETURN(std::string text, Render(document));
      st.st_mode = S_IFREG | 0444;
      st.st_size = static_cast<off_t>(text.size());
      break;
    }
    case NodeKind::kControl:
      st.st_mode = S_IFREG | 0444;
      st.st_size = static_cast<off_t>(control_path_.size() + 1);
      break;
    case NodeKind::kRealDir:
    case NodeKind::kRealFile: {
      std::string rel = RelPath(node);
      lock.unlock();
      CAPSULE_ASSIGN_OR_RETURN(struct stat real, folder_.Stat(rel));
      real.st_ino = node->ino;
      if (live) {
        real.st_size = static_cast<off_t>(live->size);
        real.st_mtim = live->mtime;
        real.st_ctim = Later(real.st_ctim, live->mtime);
        real.st_blocks = (real.st_size + 511) / 512;
      }
      if (read_only_mount || (node->kind == NodeKind::kRealFile && !WritableRealPath(rel))) real.st_mode &= ~0222;
      return real;
    }
    case NodeKind::kWsDir:
      st.st_mode = S_IFDIR | (node->mode & 07777);
      st.st_nlink = 2 + subfolders;
      break;
    case NodeKind::kWsFile:
      st.st_mode = S_IFREG | (node->mode & 07777);
      st.st_size = static_cast<off_t>(node->size);
      if (live) {
        // A write changes both times; a utimens on the open file (tar -x) sets the mtime back
        // and the ctime to now, which node->ctime holds.
        st.st_size = static_cast<off_t>(live->size);
        st.st_mtim = live->mtime;
        st.st_ctim = Later(st.st_ctim, live->mtime);
      }
      break;
    case NodeKind::kWsLink:
      st.st_mode = S_IFLNK | 0777;
      st.st_size = static_cast<off_t>(node->target.size());
      break;
    case NodeKind::kWsSpecial:
      st.st_mode = node->special | (node->mode & 07777);
      st.st_rdev = node->rdev;
      break;
  }
  if (!IsDirKind(node->kind)) st.st_nlink = 1 + node->other_links.size();
  if (unlinked) st.st_nlink = 0;
  st.st_blocks = (st.st_size + 511) / 512;
  return st;
}

Result<fuse_entry_param> CapsuleFs::Entry(const std::shared_ptr<Node>& node) {
  fuse_entry_param e{};
  CAPSULE_ASSIGN_OR_RETURN(e.attr, Attr(node.get()));
  e.ino = node->ino;
  e.generation = 1;
  double timeout = CacheTimeout(node->kind);
  e.attr_timeout = timeout;
  e.entry_timeout = timeout;
  return e;
}

// The workspace (and the fixed folders above it) changes only through this mount, and the
// kernel drops what it cached of each entry it changes through it (a write, a setattr, a link, an unlink, a rename, an entry added
// to a folder), so it keeps what it learned of workspace entries for long: a stat or a path
// walk of an unchanged file does not come to the driver (git, make and tar stat every file
// again and again). The capsule's own files also change beside the mount (capsule log append
// writes the journal directly), so the kernel asks for them again after a second; rendered
// documents change with every commit, so it asks each time.
double CapsuleFs::CacheTimeout(NodeKind kind) {
  constexpr double kWorkspaceSeconds = 3600;
  switch (kind) {
    case NodeKind::kVirtualDir:  // the root and artifacts/: fixed entries (every path walk checks the root)
    case NodeKind::kWsDir:
    case NodeKind::kWsFile:
    case NodeKind::kWsLink:
    case NodeKind::kWsSpecial:
      return kWorkspaceSeconds;
    case NodeKind::kRendered:
      return 0;
    case NodeKind::kControl:
    case NodeKind::kRealDir:
    case NodeKind::kRealFile:
      return 1;
  }
  return 0;
}

double CapsuleFs::attr_timeout(fuse_ino_t ino) {
  std::shared_ptr<Node> node = Get(ino);
  return node ? CacheTimeout(node->kind) : 0;
}

Result<std::string> CapsuleFs::Render(Document document) {
  std::lock_guard render_lock(render_mu_);
  std::shared_lock lock(tree_mu_);
  int slot = static_cast<int>(document);
  if (rendered_generation_[slot] == generation_) return rendered_[slot];
  uint64_t generation = generation_;
  CAPSULE_ASSIGN_OR_RETURN(std::string snapshot_text, SnapshotOf(WholeWorkspace()).ToCanonicalText());
  Manifest manifest = *manifest_;
  lock.unlock();
  manifest.files[kSnapshotPath] = FileDigest::OfText(snapshot_text);
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, manifest.ToCanonicalText());
  int s = static_cast<int>(Document::kSnapshot), m = static_cast<int>(Document::kManifest);
  rendered_[s] = std::move(snapshot_text);
  rendered_[m] = std::move(manifest_text);
  rendered_generation_[s] = rendered_generation_[m] = generation;
  return rendered_[slot];
}

bool CapsuleFs::WritableRealPath(const std::string& rel) const {
  return rel == kWorkingMemoryPath || rel == kEnvironmentSpecPath || rel.rfind("memory/vector_index/", 0) == 0 ||
         rel.rfind("schedule/", 0) == 0 || rel.rfind("harness/", 0) == 0 || rel.rfind("memory/attachments/", 0) == 0;
}

bool CapsuleFs::CreatableRealPath(const std::string& rel) const {
  if (rel.rfind("schedule/", 0) == 0 || rel.rfind("harness/", 0) == 0 || rel == kAttachmentsDir) return true;
  // An attachment is named by its content's digest (a commit or rename checks the bytes).
  return IsAttachmentsPath(rel) && IsSha256Hex(std::string_view(rel).substr(std::string_view(kAttachmentsDir).size() + 1));
}

}  // namespace capsule::fs
