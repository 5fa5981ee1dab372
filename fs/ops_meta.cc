// Metadata operations: lookup, attributes, the namespace of files/ and schedule/, folders.
#include <dirent.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

#include "capsule/base/canonical_scan.h"
#include "capsule/format/attachments.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"
#include "capsule/format/trust.h"
#include "capsule/format/schedule.h"
#include "fs/capsule_fs.h"
#include "fs/tree_undo.h"
#include "fs/errno_map.h"

namespace capsule::fs {
namespace {

mode_t TypeOf(const Node& node) {
  switch (node.kind) {
    case NodeKind::kVirtualDir:
    case NodeKind::kRealDir:
    case NodeKind::kWsDir: return S_IFDIR;
    case NodeKind::kWsLink: return S_IFLNK;
    case NodeKind::kWsSpecial: return node.special;
    default: return S_IFREG;
  }
}

constexpr size_t kMaxLinks = 65000;  // names of one file, as ext4 allows

bool IsWs(NodeKind kind) {
  return kind == NodeKind::kWsDir || kind == NodeKind::kWsFile || kind == NodeKind::kWsLink ||
         kind == NodeKind::kWsSpecial;
}

}  // namespace

Status CheckRecordable(const std::string& text, const std::string& what) {
  // The snapshot and the change log are JSON, which holds UTF-8 text only.
  if (!IsUtf8(text)) return FsError(EINVAL, what + ": not valid UTF-8");
  return Status::Ok();
}

Result<fuse_entry_param> CapsuleFs::do_lookup(fuse_ino_t parent, const std::string& name) {
  std::shared_ptr<Node> child;
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* dir, NodeOf(parent, name));
    // A name missing from a workspace folder stays missing until an operation through this
    // mount adds it, and the kernel drops a negative entry when it does: it may remember the
    // absence as long as a present entry (Python's imports, a compiler's include search and
    // git look for the same missing names again and again).
    if (dir->kind == NodeKind::kWsDir && name.size() <= NAME_MAX && dir->children.find(name) == dir->children.end()) {
      fuse_entry_param absent{};
      absent.ino = 0;
      absent.entry_timeout = CacheTimeout(NodeKind::kWsDir);
      return absent;
    }
    CAPSULE_ASSIGN_OR_RETURN(child, Child(dir, name));
    ++child->nlookup;
  }
  Result<fuse_entry_param> entry = Entry(child);
  if (!entry.ok()) do_forget(child->ino, 1);
  return entry;
}

void CapsuleFs::do_forget(fuse_ino_t ino, uint64_t n) {
  std::unique_lock lock(tree_mu_);
  auto it = nodes_.find(ino);
  if (it == nodes_.end() || ino == FUSE_ROOT_ID) return;
  Node* node = it->second.get();
  node->nlookup = node->nlookup > n ? node->nlookup - n : 0;
  if (node->nlookup == 0 && node->parent == nullptr) nodes_.erase(it);
}

Result<struct stat> CapsuleFs::do_getattr(fuse_ino_t ino) {
  std::shared_ptr<Node> node = Get(ino);
  if (!node) return FsError(ENOENT, "inode");
  return Attr(node.get());
}

Status CapsuleFs::Detach(Node* node) {
  if (node->parent != nullptr) node->parent->children.Erase(node->name);
  node->parent = nullptr;
  if (node->nlookup == 0) nodes_.erase(node->ino);
  return Status::Ok();
}

void CapsuleFs::RemoveName(Node* dir, const std::string& name, Node* node) {
  dir->children.Erase(name);
  if (node->parent == dir && node->name == name) {
    if (node->other_links.empty()) {
      node->parent = nullptr;
      if (node->nlookup == 0) nodes_.erase(node->ino);
      return;
    }
    node->parent = node->other_links.back().dir;  // the next name becomes its first
    node->name = node->other_links.back().name;
    node->other_links.pop_back();
  } else {
    std::erase_if(node->other_links, [&](const NodeLink& link) { return link.dir == dir && link.name == name; });
  }
  if (node->other_links.empty()) node->link_group = 0;
}

Status CapsuleFs::AddWorkspaceEntry(Node* node, Node* parent, const Caller& caller) {
  SetNewOwner(node, parent, caller);
  TreeUndo undo;
  undo.KeepNode(parent);  // its times
  WorkspaceChange change;
  Record(node, WsPath(node), &change);
  EntriesChanged(parent, &change);
  Status logged = LogChange(change, &undo);
  if (!logged.ok()) (void)Detach(node);  // not logged, not there: the kernel was told it failed
  return logged;
}

Status CapsuleFs::TruncateNow(Node* node, uint64_t size) {
  std::lock_guard wc_lock(node->wc_mu);
  // As an open, a truncate and a close: every open sees it, and it is committed at once.
  CAPSULE_RETURN_IF_ERROR(EnsureWorkingCopy(node, size == 0));
  WorkingCopy& wc = *node->wc;
  if (::ftruncate(wc.fd.get(), static_cast<off_t>(size)) != 0) return Status::IOError(wc.path, errno);
  if (wc.hash && (size < wc.hash->queued() || size > wc.size)) wc.hash.reset();
  wc.size = size;
  wc.dirty = true;
  clock_gettime(CLOCK_REALTIME, &wc.mtime);  // a truncate changes the content: now is its mtime
  Status committed = CommitWorkingCopy(node);
  if (node->writers.empty()) DropWorkingCopy(node);
  return committed;
}

Status CapsuleFs::SetOwner(Node* node, const std::string& rel, const struct stat& attr, int to_set,
                           const Caller& caller) {
  uint32_t uid = node->uid.value_or(driver_uid_), gid = node->gid.value_or(driver_gid_);
  uint32_t new_uid = (to_set & FUSE_SET_ATTR_UID) ? attr.st_uid : uid;
  uint32_t new_gid = (to_set & FUSE_SET_ATTR_GID) ? attr.st_gid : gid;
  if (!IsWs(node->kind)) {
    if (new_uid == uid && new_gid == gid) return Status::Ok();
    return FsError(EPERM, rel + ": the capsule's own files belong to the driver's user");
  }
  // As chown(2) has it: root changes anything; an owner may give the file to a group of theirs.
  if (caller.uid != 0) {
    if (new_uid != uid) return FsError(EPERM, rel + ": only root gives a file away");
    if (new_gid != gid && (caller.uid != uid || !caller.InGroup(new_gid))) {
      return FsError(EPERM, rel + ": not the owner, or not a member of that group");
    }
  }
  node->uid = new_uid == driver_uid_ ? std::nullopt : std::optional<uint32_t>(new_uid);
  node->gid = new_gid == driver_gid_ ? std::nullopt : std::optional<uint32_t>(new_gid);
  clock_gettime(CLOCK_REALTIME, &node->ctime);
  return Status::Ok();
}

Status CapsuleFs::ChangeOwnerAndMode(Node* node, const std::string& rel, const struct stat& attr, int to_set,
                                     const Caller& caller) {
  const bool ws = IsWs(node->kind);
  const bool owner = to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID);
  const bool mode = (to_set & FUSE_SET_ATTR_MODE) && ws && node->kind != NodeKind::kWsLink;
  if (!owner && !mode) return Status::Ok();
  std::unique_lock lock(tree_mu_);
  TreeUndo undo;
  undo.KeepNode(node);
  if (owner) {
    if (Status set = SetOwner(node, rel, attr, to_set, caller); !set.ok()) {
      undo.Restore(&nodes_);
      return set;
    }
  }
  if (mode) {
    node->mode = attr.st_mode & 07777;
    clock_gettime(CLOCK_REALTIME, &node->ctime);
  }
  if (!ws || node->parent == nullptr) return Status::Ok();
  // One line for both: chown(2) of a set-id file comes with the mode that clears those bits.
  WorkspaceChange change;
  RecordAllNames(node, &change);
  return LogChange(change, &undo);
}

Result<struct stat> CapsuleFs::do_setattr(fuse_ino_t ino, const struct stat& attr, int to_set, Handle* h,
                                          const Caller& caller) {
  std::shared_ptr<Node> node = Get(ino);
  if (!node) return FsError(ENOENT, "inode");
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite());
  std::string rel;
  {
    std::shared_lock lock(tree_mu_);
    rel = RelPath(node.get());
  }
  bool ws = IsWs(node->kind);
  bool real_writable = node->kind == NodeKind::kRealFile && WritableRealPath(rel);
  if (!ws && !real_writable && (to_set & (FUSE_SET_ATTR_SIZE | FUSE_SET_ATTR_MODE))) {
    return FsError(EPERM, rel + ": not changeable through the mount");
  }
  if ((to_set & FUSE_SET_ATTR_MODE) && !ws) return FsError(EPERM, rel + ": modes of capsule files are fixed");
  if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID | FUSE_SET_ATTR_MODE)) {
    CAPSULE_RETURN_IF_ERROR(ChangeOwnerAndMode(node.get(), rel, attr, to_set, caller));
  }
  if (to_set & FUSE_SET_ATTR_SIZE) {
    if (node->kind != NodeKind::kWsFile && node->kind != NodeKind::kRealFile) return FsError(EISDIR, rel);
    uint64_t size = static_cast<uint64_t>(attr.st_size);
    if (h != nullptr && h->writer) {
      std::lock_guard wc_lock(node->wc_mu);
      CAPSULE_RETURN_IF_ERROR(EnsureWorkingCopy(node.get(), size == 0));
      WorkingCopy& wc = *node->wc;
      if (::ftruncate(wc.fd.get(), attr.st_size) != 0) return Status::IOError(wc.path, errno);
      if (wc.hash && (size < wc.hash->queued() || size > wc.size)) wc.hash.reset();
      wc.size = size;
      wc.dirty = true;
      h->wrote = true;
      clock_gettime(CLOCK_REALTIME, &wc.mtime);
    } else {
      CAPSULE_RETURN_IF_ERROR(TruncateNow(node.get(), size));
    }
  }
  if ((to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_ATIME_NOW)) && !(to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW))) {
    std::unique_lock lock(tree_mu_);
    clock_gettime(CLOCK_REALTIME, &node->ctime);
    node->atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? node->ctime : attr.st_atim;
  }
  if (to_set & (FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_MTIME_NOW)) {
    struct timespec mtime = attr.st_mtim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) clock_gettime(CLOCK_REALTIME, &mtime);
    std::lock_guard wc_lock(node->wc_mu);  // open writers commit with this time (cp -p, tar -x)
    std::unique_lock lock(tree_mu_);
    TreeUndo undo;
    undo.KeepNode(node.get());
    node->mtime = mtime;
    clock_gettime(CLOCK_REALTIME, &node->ctime);
    if (to_set & FUSE_SET_ATTR_ATIME) node->atime = attr.st_atim;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) node->atime = node->ctime;
    if (ws && node->parent != nullptr) {  // kept across remounts
      WorkspaceChange change;
      for (const std::string& path : WsPaths(node.get())) change.times[path] = node->mtime;
      CAPSULE_RETURN_IF_ERROR(LogChange(change, &undo));
    }
    if (node->wc) node->wc->mtime = mtime;  // once logged (wc_mu is held throughout)
  }
  return Attr(node.get());
}

Result<std::string> CapsuleFs::do_readlink(fuse_ino_t ino) {
  std::shared_ptr<Node> node = Get(ino);
  if (!node) return FsError(ENOENT, "inode");
  std::shared_lock lock(tree_mu_);
  if (node->kind != NodeKind::kWsLink) return FsError(EINVAL, node->name + ": not a link");
  return node->target;
}

Result<fuse_entry_param> CapsuleFs::do_mknod(fuse_ino_t parent_ino, const std::string& name, mode_t mode,
                                             dev_t rdev, const Caller& caller) {
  if (S_ISREG(mode) || (mode & S_IFMT) == 0) {
    CAPSULE_ASSIGN_OR_RETURN(auto created, do_create(parent_ino, name, mode, O_WRONLY | O_CREAT | O_EXCL, caller));
    do_release(created.second);
    return created.first;
  }
  if (!S_ISFIFO(mode) && !S_ISSOCK(mode) && !S_ISCHR(mode) && !S_ISBLK(mode)) return FsError(EINVAL, name);
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* parent, NodeOf(parent_ino, name));
    if (parent->kind != NodeKind::kWsDir) return FsError(EPERM, name + ": FIFOs, sockets and devices live only under files/");
    if (parent->parent == nullptr) return FsError(ENOENT, name);  // its folder was removed
    if (parent->children.count(name) != 0) return FsError(EEXIST, name);
    if (name.size() > NAME_MAX) return FsError(ENAMETOOLONG, name);
    CAPSULE_RETURN_IF_ERROR(CheckRecordable(name, "name"));
    // Metadata only: the kernel serves a FIFO, a socket or a device itself, never through us.
    node = NewNode(NodeKind::kWsSpecial, parent, name);
    node->special = mode & S_IFMT;
    node->mode = mode & 07777;
    node->rdev = (S_ISCHR(mode) || S_ISBLK(mode)) ? rdev : 0;
    CAPSULE_RETURN_IF_ERROR(AddWorkspaceEntry(node.get(), parent, caller));
    ++node->nlookup;
  }
  return Entry(node);
}

Result<fuse_entry_param> CapsuleFs::do_mkdir(fuse_ino_t parent_ino, const std::string& name, mode_t mode,
                                             const Caller& caller) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* parent, NodeOf(parent_ino, name));
    if (Child(parent, name).ok()) return FsError(EEXIST, name);
    std::string rel = RelPath(parent) + "/" + name;
    if (parent->kind == NodeKind::kRealDir && CreatableRealPath(rel)) {
      if (IsSchedulePath(rel) && rel != "schedule/waiting" && rel != "schedule/firing" && rel != "schedule/ending") {
        return FsError(EINVAL, rel + ": not a schedule folder: schedule/waiting, schedule/firing or schedule/ending");
      }
      CAPSULE_RETURN_IF_ERROR(folder_.MakeDir(rel, mode & 07777, /*exist_ok=*/false));
      CAPSULE_RETURN_IF_ERROR(folder_.SyncDir(RelPath(parent)));
      CAPSULE_ASSIGN_OR_RETURN(node, Child(parent, name));
    } else if (parent->kind == NodeKind::kWsDir) {
      CAPSULE_RETURN_IF_ERROR(CheckRecordable(name, "name"));
      node = NewNode(NodeKind::kWsDir, parent, name);
      node->mode = mode & 07777;
      CAPSULE_RETURN_IF_ERROR(AddWorkspaceEntry(node.get(), parent, caller));
    } else {
      return FsError(EPERM, rel + ": no new folders here");
    }
    ++node->nlookup;
  }
  return Entry(node);
}

Result<fuse_entry_param> CapsuleFs::do_symlink(const std::string& target, fuse_ino_t parent_ino,
                                               const std::string& name, const Caller& caller) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* parent, NodeOf(parent_ino, name));
    if (parent->kind != NodeKind::kWsDir) return FsError(EPERM, name + ": links live only under files/");
    if (parent->children.count(name) != 0) return FsError(EEXIST, name);
    CAPSULE_RETURN_IF_ERROR(CheckRecordable(name, "name"));
    CAPSULE_RETURN_IF_ERROR(CheckRecordable(target, name + ": link target"));
    node = NewNode(NodeKind::kWsLink, parent, name);
    node->target = target;
    CAPSULE_RETURN_IF_ERROR(AddWorkspaceEntry(node.get(), parent, caller));
    ++node->nlookup;
  }
  return Entry(node);
}

Result<fuse_entry_param> CapsuleFs::do_link(fuse_ino_t ino, fuse_ino_t newparent_ino, const std::string& newname) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  {
    std::unique_lock lock(tree_mu_);
    auto it = nodes_.find(ino);
    if (it == nodes_.end()) return FsError(ENOENT, newname);
    node = it->second;
    CAPSULE_ASSIGN_OR_RETURN(Node* newparent, NodeOf(newparent_ino, newname));
    if (IsDirKind(node->kind)) return FsError(EPERM, newname + ": a folder has one name");
    if (!IsWs(node->kind) || newparent->kind != NodeKind::kWsDir) {
      return FsError(IsWs(node->kind) != (newparent->kind == NodeKind::kWsDir) ? EXDEV : EPERM,
                     newname + ": hard links live only under files/");
    }
    if (newname.size() > NAME_MAX) return FsError(ENAMETOOLONG, newname);
    if (newparent->parent == nullptr) return FsError(ENOENT, newname);  // its folder was removed
    if (newparent->children.count(newname) != 0) return FsError(EEXIST, newname);
    if (node->parent == nullptr) return FsError(ENOENT, newname + ": the file has no name left");
    if (node->other_links.size() + 1 >= kMaxLinks) return FsError(EMLINK, newname);
    CAPSULE_RETURN_IF_ERROR(CheckRecordable(newname, "name"));
    TreeUndo undo;
    undo.KeepEntry(newparent, newname);
    undo.KeepNode(newparent);
    undo.KeepNode(node);
    if (node->link_group == 0) node->link_group = next_link_group_++;
    newparent->children.Put(newname, node);
    node->other_links.push_back(NodeLink{newparent, newname});
    clock_gettime(CLOCK_REALTIME, &node->ctime);
    WorkspaceChange change;
    RecordAllNames(node.get(), &change);  // every name now carries the link group
    EntriesChanged(newparent, &change);
    CAPSULE_RETURN_IF_ERROR(LogChange(change, &undo));  // not logged, not there
    ++node->nlookup;
  }
  return Entry(node);
}

Status CapsuleFs::do_unlink(fuse_ino_t parent_ino, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* parent, NodeOf(parent_ino, name));
    CAPSULE_ASSIGN_OR_RETURN(std::shared_ptr<Node> node, Child(parent, name));
    std::string rel = RelPath(node.get());
    if (IsDirKind(node->kind)) return FsError(EISDIR, rel);
    if (parent->kind == NodeKind::kRealDir && CreatableRealPath(rel)) {
      CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, rel, std::nullopt));  // capsule/format/trust.h
      CAPSULE_RETURN_IF_ERROR(folder_.Unlink(rel));
      CAPSULE_RETURN_IF_ERROR(folder_.SyncDir(RelPath(parent)));
      ++generation_;
      return Detach(node.get());
    }
    if (parent->kind != NodeKind::kWsDir) return FsError(EPERM, rel + ": cannot be removed");
    TreeUndo undo;
    undo.KeepEntry(parent, name);
    undo.KeepNode(parent);
    undo.KeepNode(node);
    WorkspaceChange change;
    change.del.push_back(WsChildPath(parent, name));
    EntriesChanged(parent, &change);
    clock_gettime(CLOCK_REALTIME, &node->ctime);
    RemoveName(parent, name, node.get());
    RecordAllNames(node.get(), &change);  // the names left: one fewer in the group, or none
    CAPSULE_RETURN_IF_ERROR(LogChange(change, &undo));
  }
  return Status::Ok();
}

Status CapsuleFs::do_rmdir(fuse_ino_t parent_ino, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  {
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(Node* parent, NodeOf(parent_ino, name));
    CAPSULE_ASSIGN_OR_RETURN(std::shared_ptr<Node> node, Child(parent, name));
    std::string rel = RelPath(node.get());
    if (!IsDirKind(node->kind)) return FsError(ENOTDIR, rel);
    if (parent->kind == NodeKind::kRealDir && CreatableRealPath(rel)) {
      CAPSULE_RETURN_IF_ERROR(folder_.Unlink(rel, /*folder=*/true));
      ++generation_;
      return Detach(node.get());
    }
    if (node->kind != NodeKind::kWsDir || node == files_) return FsError(EPERM, rel + ": cannot be removed");
    if (!node->children.empty()) return FsError(ENOTEMPTY, rel);
    TreeUndo undo;
    undo.KeepEntry(parent, name);
    undo.KeepNode(parent);
    undo.KeepNode(node);
    WorkspaceChange change;
    change.del.push_back(WsPath(node.get()));
    EntriesChanged(parent, &change);
    CAPSULE_RETURN_IF_ERROR(Detach(node.get()));
    CAPSULE_RETURN_IF_ERROR(LogChange(change, &undo));
  }
  return Status::Ok();
}

Status CapsuleFs::do_rename(fuse_ino_t parent_ino, const std::string& name, fuse_ino_t newparent_ino,
                            const std::string& newname, unsigned flags) {
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) return FsError(EINVAL, name + ": only RENAME_NOREPLACE is supported");
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  {
    std::unique_lock lock(tree_mu_);
    auto p = nodes_.find(parent_ino), np = nodes_.find(newparent_ino);
    if (p == nodes_.end() || np == nodes_.end()) return FsError(ENOENT, name);
    Node* parent = p->second.get();
    Node* newparent = np->second.get();
    CAPSULE_ASSIGN_OR_RETURN(std::shared_ptr<Node> node, Child(parent, name));
    std::string rel = RelPath(node.get());
    std::string new_rel = RelPath(newparent) + "/" + newname;
    bool real = parent->kind == NodeKind::kRealDir && newparent->kind == NodeKind::kRealDir &&
                CreatableRealPath(rel) && CreatableRealPath(new_rel);
    bool ws = parent->kind == NodeKind::kWsDir && newparent->kind == NodeKind::kWsDir;
    if (!real && !ws) {
      if (IsWs(parent->kind) != IsWs(newparent->kind) && (IsWs(parent->kind) || CreatableRealPath(rel))) {
        return FsError(EXDEV, rel + " -> " + new_rel);
      }
      return FsError(EPERM, rel + ": cannot be renamed");
    }
    Result<std::shared_ptr<Node>> existing = Child(newparent, newname);
    std::shared_ptr<Node> target = existing.ok() ? *existing : nullptr;
    if (target == node) return Status::Ok();
    if (target && (flags & RENAME_NOREPLACE)) return FsError(EEXIST, new_rel);
    for (Node* n = newparent; n != nullptr; n = n->parent) {
      if (n == node.get()) return FsError(EINVAL, new_rel + ": inside " + rel);
    }
    if (target && IsDirKind(node->kind) && !IsDirKind(target->kind)) return FsError(ENOTDIR, new_rel);
    if (target && !IsDirKind(node->kind) && IsDirKind(target->kind)) return FsError(EISDIR, new_rel);
    if (target && IsDirKind(target->kind) && !target->children.empty()) return FsError(ENOTEMPTY, new_rel);
    if (ws) CAPSULE_RETURN_IF_ERROR(CheckRecordable(newname, "name"));
    if (real && IsSchedulePath(new_rel) && !IsDirKind(node->kind)) CAPSULE_RETURN_IF_ERROR(CheckScheduleName(new_rel));
    // A real file is read beneath the capsule folder held open, never through a link.
    if (real) {
      UniqueFd moving;
      CAPSULE_ASSIGN_OR_RETURN(moving, folder_.OpenFile(rel, O_RDONLY));
      if (IsAttachmentsPath(new_rel)) {  // named by a digest: the bytes must be those it says (EINVAL)
        CAPSULE_RETURN_IF_ERROR(CheckAttachmentFile(moving.get(), folder_.PathOf(rel), new_rel));
      }
      // Known as this mount's before they are there (capsule/format/trust.h).
      FileDigest moved;
      CAPSULE_ASSIGN_OR_RETURN(moved.sha256, Sha256Fd(moving.get(), folder_.PathOf(rel), &moved.size));
      CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, rel, std::nullopt));
      CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, new_rel, moved));
      CAPSULE_RETURN_IF_ERROR(folder_.Rename(rel, new_rel, flags));
      CAPSULE_RETURN_IF_ERROR(folder_.SyncDir(RelPath(parent)));
      CAPSULE_RETURN_IF_ERROR(folder_.SyncDir(RelPath(newparent)));
    }
    WorkspaceChange change;
    if (ws) {
      WorkspaceChange old;
      AddSubtree(node.get(), WsChildPath(parent, name), &old);
      for (const auto& [path, entry] : old.set) change.del.push_back(path);
      if (target) change.del.push_back(WsChildPath(newparent, newname));
    }
    if (real) {
      if (target) CAPSULE_RETURN_IF_ERROR(Detach(target.get()));
      parent->children.Erase(node->name);
      node->name = newname;
      node->parent = newparent;
      newparent->children.Put(newname, node);
      ++generation_;
      return Status::Ok();
    }
    TreeUndo undo;
    undo.KeepEntry(parent, name);
    undo.KeepEntry(newparent, newname);
    undo.KeepNode(parent);
    undo.KeepNode(newparent);
    undo.KeepNode(node);
    undo.KeepNode(target);
    if (target) {
      clock_gettime(CLOCK_REALTIME, &target->ctime);
      RemoveName(newparent, newname, target.get());
      RecordAllNames(target.get(), &change);  // a hard-linked target keeps its other names
    }
    // The name that moves is this one, whichever of the node's names it is.
    parent->children.Erase(name);
    if (node->parent == parent && node->name == name) {
      node->parent = newparent;
      node->name = newname;
    } else {
      for (NodeLink& link : node->other_links) {
        if (link.dir == parent && link.name == name) link = NodeLink{newparent, newname};
      }
    }
    newparent->children.Put(newname, node);
    clock_gettime(CLOCK_REALTIME, &node->ctime);
    EntriesChanged(parent, &change);
    if (newparent != parent) EntriesChanged(newparent, &change);
    AddSubtree(node.get(), WsChildPath(newparent, newname), &change);
    CAPSULE_RETURN_IF_ERROR(LogChange(change, &undo));
  }
  return Status::Ok();
}

Result<Handle*> CapsuleFs::do_opendir(fuse_ino_t ino) {
  std::shared_ptr<Node> node = Get(ino);
  if (!node) return FsError(ENOENT, "inode");
  auto handle = std::make_unique<Handle>();
  handle->node = node;
  handle->entries.push_back({".", node->ino, S_IFDIR});
  std::shared_lock lock(tree_mu_);
  if (!IsDirKind(node->kind)) return FsError(ENOTDIR, node->name);
  handle->entries.push_back({"..", node->parent ? node->parent->ino : node->ino, S_IFDIR});
  if (node->kind != NodeKind::kRealDir) {
    for (const auto& [name, child] : node->children) handle->entries.push_back({name, child->ino, TypeOf(*child)});
    return Register(std::move(handle));
  }
  std::string rel = RelPath(node.get());
  // Beneath the capsule folder held open: a link put where a real folder was is refused.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd opened, folder_.OpenFile(rel, O_RDONLY | O_DIRECTORY));
  DIR* dir = ::fdopendir(opened.get());
  if (dir == nullptr) return Status::IOError(folder_.PathOf(rel), errno);
  opened.Release();
  while (struct dirent* d = ::readdir(dir)) {
    std::string name = d->d_name;
    if (name == "." || name == ".." || IsTempDebris(name)) continue;
    auto it = node->children.find(name);
    fuse_ino_t child_ino = it != node->children.end() ? it->second->ino : (1ull << 62) + d->d_ino;
    handle->entries.push_back({name, child_ino, static_cast<mode_t>(d->d_type == DT_DIR ? S_IFDIR : S_IFREG)});
  }
  ::closedir(dir);
  return Register(std::move(handle));
}

Result<struct statvfs> CapsuleFs::do_statfs() {
  struct statvfs st;
  if (::statvfs(options_.dir.c_str(), &st) != 0) return Status::IOError(options_.dir, errno);
  MountState state = gate_.state();
  if (state == MountState::kRetired || state == MountState::kReadOnly) st.f_flag |= ST_RDONLY;
  return st;
}

}  // namespace capsule::fs
