// Data operations: open, create, read, write, flush, release, fsync. A writer works on a
// private working copy that replaces the file whole at flush (close) or fsync.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>
#include <shared_mutex>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/documents.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"
#include "capsule/format/trust.h"
#include "capsule/format/schedule.h"
#include "fs/capsule_fs.h"
#include "fs/document_writes.h"
#include "fs/errno_map.h"
#include "fs/tree_undo.h"

namespace capsule::fs {
namespace {

bool Writes(int flags) { return (flags & O_ACCMODE) != O_RDONLY || (flags & O_TRUNC); }

// Enters the gate for a data write into `*ticket`.
Status EnterInto(StateGate& gate, std::optional<WriteTicket>* ticket) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket entered, gate.EnterWrite());
  ticket->emplace(std::move(entered));
  return Status::Ok();
}

}  // namespace

Result<Handle*> CapsuleFs::do_open(fuse_ino_t ino, int flags, const WriteTicket* held) {
  std::shared_ptr<Node> node = Get(ino);
  if (!node) return FsError(ENOENT, "inode");
  auto h = std::make_unique<Handle>();
  h->node = node;
  std::string rel;
  std::string sha;
  {
    std::shared_lock lock(tree_mu_);
    rel = RelPath(node.get());
    sha = node->sha256;
  }
  bool writes = Writes(flags);
  switch (node->kind) {
    case NodeKind::kVirtualDir:
    case NodeKind::kRealDir:
    case NodeKind::kWsDir:
      if (writes) return FsError(EISDIR, rel);
      return Register(std::move(h));
    case NodeKind::kWsLink:
      return FsError(ELOOP, rel);
    case NodeKind::kWsSpecial:  // the kernel opens FIFOs, sockets and devices itself
      return FsError(ENXIO, rel);
    case NodeKind::kRendered:
    case NodeKind::kControl:
      if (writes) return FsError(EACCES, rel + ": read-only, rendered from the live capsule");
      if (node->kind == NodeKind::kControl) {
        h->data = control_path_ + "\n";
      } else {
        CAPSULE_ASSIGN_OR_RETURN(h->data, Render(node->document));
      }
      return Register(std::move(h));
    case NodeKind::kRealFile: {
      if (writes && rel == kJournalPath) {
        if (!journal_sink_ || (flags & O_TRUNC)) return FsError(EPERM, rel + ": append-only journal");
        std::optional<WriteTicket> ticket;
        if (held == nullptr) CAPSULE_RETURN_IF_ERROR(EnterInto(gate_, &ticket));
        CAPSULE_ASSIGN_OR_RETURN(struct stat st, folder_.Stat(rel));  // the journal, not a link in its place
        h->journal = std::make_unique<LineAssembler>(journal_sink_, journal_unfinished_, static_cast<uint64_t>(st.st_size),
                                                     (flags & O_APPEND) != 0);
      } else if (writes && !WritableRealPath(rel)) {
        return FsError(EACCES, rel + ": read-only in the mount");
      } else if (writes && IsSchedulePath(rel)) {
        CAPSULE_RETURN_IF_ERROR(CheckScheduleName(rel));  // put there beside the mount: never valid
      }
      std::lock_guard wc_lock(node->wc_mu);
      CAPSULE_RETURN_IF_ERROR(CommittedFile(node.get(), h.get()).status());
      break;
    }
    case NodeKind::kWsFile: {
      std::lock_guard wc_lock(node->wc_mu);
      if (!writes) CAPSULE_RETURN_IF_ERROR(CommittedFile(node.get(), h.get()).status());
      h->keep_cache = node->cache_filled_at == node->content_resets;
      node->cache_filled_at = node->content_resets;
      break;
    }
  }
  if (writes && !h->journal) {
    std::optional<WriteTicket> ticket;
    if (held == nullptr) CAPSULE_RETURN_IF_ERROR(EnterInto(gate_, &ticket));
    std::lock_guard wc_lock(node->wc_mu);
    if (flags & O_TRUNC) {
      CAPSULE_RETURN_IF_ERROR(EnsureWorkingCopy(node.get(), true));
      std::shared_lock lock(tree_mu_);
      if (node->kind == NodeKind::kWsFile && node->size == 0) node->wc->dirty = false;  // nothing to commit yet
      h->wrote = node->wc->dirty;
    }
    node->writers.insert(h.get());
    h->writer = true;
    h->append = (flags & O_APPEND) != 0;
  }
  return Register(std::move(h));
}

Result<std::pair<fuse_entry_param, Handle*>> CapsuleFs::CreateReal(Node* parent, const std::string& name,
                                                                   mode_t mode, int flags) {
  std::string rel;
  {
    std::shared_lock lock(tree_mu_);
    rel = RelPath(parent) + "/" + name;
  }
  if (parent->kind != NodeKind::kRealDir || !CreatableRealPath(rel)) return FsError(EPERM, rel + ": no new files here");
  // A name no content could make valid is refused now, not at the close (EINVAL).
  if (IsSchedulePath(rel)) CAPSULE_RETURN_IF_ERROR(CheckScheduleName(rel));
  if (rel.rfind(std::string(kThreadsDir) + "/", 0) == 0) CAPSULE_RETURN_IF_ERROR(CheckThreadPath(rel));
  // One ticket from the new entry to its open handle: a freeze cannot come between them.
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  bool created = false;
  {
    // Looked at beneath the capsule folder held open (a link there counts as there, never followed).
    Result<struct stat> there = folder_.Stat(rel);
    if (!there.ok() && there.status().code() != Code::kNotFound) return there.status();
    if (there.ok() && (flags & O_EXCL)) return FsError(EEXIST, rel);
    if (!there.ok()) {
      CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, rel, FileDigest::OfText("")));  // capsule/format/trust.h
      CAPSULE_RETURN_IF_ERROR(folder_.WriteFileAtomic(rel, "", mode & 07777));
      created = true;
    }
    std::unique_lock lock(tree_mu_);
    CAPSULE_ASSIGN_OR_RETURN(node, Child(parent, name));
    ++node->nlookup;
    ++generation_;
  }
  Result<fuse_entry_param> entry = Entry(node);
  Result<Handle*> h = entry.ok() ? do_open(node->ino, flags & ~(O_CREAT | O_EXCL), &ticket)
                                 : Result<Handle*>(entry.status());
  if (!h.ok()) {
    // A failed create leaves nothing behind.
    if (created && folder_.Unlink(rel).ok()) {
      (void)folder_.SyncDir(DirName(rel));
      std::unique_lock lock(tree_mu_);
      ++generation_;
      (void)Detach(node.get());
    }
    do_forget(node->ino, 1);
    return h.status();
  }
  return std::make_pair(*entry, *h);
}

Result<std::pair<fuse_entry_param, Handle*>> CapsuleFs::do_create(fuse_ino_t parent_ino, const std::string& name,
                                                                  mode_t mode, int flags, const Caller& caller) {
  std::shared_ptr<Node> parent = Get(parent_ino);
  if (!parent) return FsError(ENOENT, name);
  if (parent->kind != NodeKind::kWsDir) return CreateReal(parent.get(), name, mode, flags);
  // One ticket from the new entry to its open handle: a freeze cannot come between them.
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite(WriteKind::kFolderChange));
  std::shared_ptr<Node> node;
  bool created = false;
  {
    std::unique_lock lock(tree_mu_);
    Result<std::shared_ptr<Node>> existing = Child(parent.get(), name);
    if (existing.ok()) {
      if (flags & O_EXCL) return FsError(EEXIST, name);
      node = *existing;
    } else if (ToErrno(existing.status()) != ENOENT) {
      return existing.status();
    } else {
      CAPSULE_RETURN_IF_ERROR(CheckRecordable(name, "name"));
      node = NewNode(NodeKind::kWsFile, parent.get(), name);
      node->mode = mode & 07777;
      node->sha256 = Sha256Hex("");
      node->size = 0;
      CAPSULE_RETURN_IF_ERROR(AddWorkspaceEntry(node.get(), parent.get(), caller));
      created = true;
    }
    ++node->nlookup;
  }
  Result<fuse_entry_param> entry = Entry(node);
  Result<Handle*> h = entry.ok() ? do_open(node->ino, flags & ~(O_CREAT | O_EXCL), &ticket)
                                 : Result<Handle*>(entry.status());
  if (!h.ok()) {
    // A failed create leaves nothing behind: the entry it made is taken out again. When the
    // removal's line cannot be logged either (a full disk), the entry stays, as the log has
    // it: what the view shows is what a crash brings back.
    if (created) {
      std::unique_lock lock(tree_mu_);
      TreeUndo undo;
      undo.KeepEntry(parent.get(), name);
      undo.KeepNode(node);
      WorkspaceChange change;
      change.del.push_back(WsPath(node.get()));
      if (Detach(node.get()).ok() && !LogChange(change, &undo).ok() && entry_notifier_) {
        // The kernel, told the create failed, may remember the name as absent.
        entry_notifier_->Forget(parent_ino, name);
      }
    }
    do_forget(node->ino, 1);
    return h.status();
  }
  return std::make_pair(*entry, *h);
}

Result<ReadReply> CapsuleFs::do_read(Handle* h, size_t size, off_t off) {
  ReadReply reply;
  Node* node = h->node.get();
  if (!h->data.empty() || node->kind == NodeKind::kRendered || node->kind == NodeKind::kControl) {
    if (static_cast<size_t>(off) < h->data.size()) reply.data = h->data.substr(static_cast<size_t>(off), size);
    return reply;
  }
  if (node->kind != NodeKind::kWsFile && node->kind != NodeKind::kRealFile) return FsError(EISDIR, NameOf(node));
  if (node->kind == NodeKind::kWsFile) workspace_reads_.fetch_add(1, std::memory_order_relaxed);
  // Every open reads the file as its writers have made it so far: the working copy while
  // there is one, the committed file otherwise.
  std::lock_guard wc_lock(node->wc_mu);
  if (!node->wc) {
    CAPSULE_ASSIGN_OR_RETURN(reply.file, CommittedFile(node, h));
    return reply;
  }
  reply.data.resize(size);
  CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(node->wc->fd.get(), reply.data.data(), size, off, node->wc->path));
  reply.data.resize(n);
  return reply;
}

Result<WriteDone> CapsuleFs::do_write(Handle* h, const char* buf, size_t size, off_t off) {
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite());
  if (h->journal) {
    CAPSULE_RETURN_IF_ERROR(h->journal->Write(static_cast<uint64_t>(off), std::string_view(buf, size)));
    return WriteDone{size, {}};
  }
  if (!h->writer) return FsError(EBADF, NameOf(h->node.get()) + ": not open for writing");
  Node* node = h->node.get();
  std::lock_guard wc_lock(node->wc_mu);
  CAPSULE_RETURN_IF_ERROR(EnsureWorkingCopy(node, false));
  WorkingCopy& wc = *node->wc;
  if (h->append) off = static_cast<off_t>(wc.size);
  CAPSULE_RETURN_IF_ERROR(CheckSpecAsWritten(node, wc, std::string_view(buf, size), off));
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pwrite(wc.fd.get(), buf + done, size - done, off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(wc.path, errno);
    done += static_cast<size_t>(n);
  }
  uint64_t end = static_cast<uint64_t>(off) + size;
  // Written in order from the start so far: the digest goes on, after the answer. A write
  // over bytes already hashed makes the commit hash the file instead.
  bool in_order = wc.hash && static_cast<uint64_t>(off) == wc.hash->queued() && wc.hash->queued() == wc.size;
  if (wc.hash && !in_order && static_cast<uint64_t>(off) < wc.hash->queued()) wc.hash.reset();
  WriteDone done_write{size, in_order ? RunningHash::Queue(wc.hash, static_cast<uint64_t>(off),
                                                           std::string_view(buf, size))
                                      : DeferredHash()};
  if (end > wc.size) wc.size = end;
  wc.dirty = true;
  h->wrote = true;
  clock_gettime(CLOCK_REALTIME, &wc.mtime);
  return done_write;
}

Status CapsuleFs::do_fallocate(Handle* h, int mode, off_t offset, off_t length) {
  if (h->journal) return FsError(EPERM, "memory/timeline_events.jsonl: append-only journal");
  if (!h->writer) return FsError(EBADF, NameOf(h->node.get()) + ": not open for writing");
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite());
  Node* node = h->node.get();
  std::lock_guard wc_lock(node->wc_mu);
  CAPSULE_RETURN_IF_ERROR(EnsureWorkingCopy(node, false));
  WorkingCopy& wc = *node->wc;
  if (::fallocate(wc.fd.get(), mode, offset, length) != 0) return FsError(errno, wc.path + ": fallocate");
  struct stat st;
  if (::fstat(wc.fd.get(), &st) != 0) return Status::IOError(wc.path, errno);
  wc.size = static_cast<uint64_t>(st.st_size);
  wc.hash.reset();  // bytes changed somewhere: hashed again at commit
  wc.dirty = true;
  h->wrote = true;
  clock_gettime(CLOCK_REALTIME, &wc.mtime);
  return Status::Ok();
}

Status CapsuleFs::CheckSpecAsWritten(Node* node, const WorkingCopy& wc, std::string_view data, off_t off) {
  constexpr uint64_t kLargestChecked = 1 << 20;  // a larger document is checked at close only
  const uint64_t end = static_cast<uint64_t>(off) + data.size();
  if (node->kind != NodeKind::kRealFile || std::max(end, wc.size) > kLargestChecked) return Status::Ok();
  std::string rel;
  {
    std::shared_lock lock(tree_mu_);
    if (node->parent == nullptr) return Status::Ok();
    rel = RelPath(node);
  }
  if (!IsCheckedWhenWritten(rel)) return Status::Ok();
  // The document as this write would leave it, judged before a byte of it is kept: a refused
  // write leaves the working copy as it was.
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadAll(FileReadAt(wc.fd.get(), wc.path)));
  text.resize(std::max<size_t>(text.size(), end), '\0');
  text.replace(static_cast<size_t>(off), data.size(), data);
  if (ParseJson(text, rel).ok()) {
    Status checked = CheckWrittenDocument(rel, text);
    if (!checked.ok()) return FsError(EINVAL, checked.message() + "; this write was not kept");
    return Status::Ok();
  }
  // Not whole yet. A write that extends the document and leaves it no JSON text could begin
  // with is refused now; anything else is judged whole at fsync and close.
  if (end >= wc.size && !CouldBecomeJson(text)) {
    return FsError(EINVAL, rel + ": not JSON, and nothing written after it could make it so; this write was not kept");
  }
  return Status::Ok();
}

Status CapsuleFs::RefuseCommit(const std::string& rel, const std::string& wc_path, const Status& why) {
  Result<std::string> content = work_.ReadFile(BaseName(wc_path));
  if (!content.ok() || content->empty()) return FsError(EINVAL, why.message());  // nothing written to keep
  Result<std::string> kept = KeepRejected(folder_, rel, *content);
  if (!kept.ok()) return FsError(EINVAL, why.message() + "; the bytes written could not be kept aside: " + kept.status().message());
  return FsError(EINVAL, why.message() + "; the old content stays, and the bytes written are kept in " +
                             JoinPath(options_.dir, *kept));
}

Status CapsuleFs::do_flush(Handle* h) {
  if (h->journal) return Status::Ok();  // an unfinished line stays the journal's, for the next write
  if (!h->writer) return Status::Ok();
  Node* node = h->node.get();
  {
    std::lock_guard wc_lock(node->wc_mu);
    if (!h->wrote || !node->wc || !node->wc->dirty) return Status::Ok();
  }
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite());
  std::lock_guard wc_lock(node->wc_mu);
  if (!h->wrote) return Status::Ok();
  CAPSULE_RETURN_IF_ERROR(CommitWorkingCopy(node));
  h->wrote = false;
  return Status::Ok();
}

Status CapsuleFs::do_fsync(Handle* h) {
  if (h->journal || !h->writer) return SyncAll();
  Node* node = h->node.get();
  {
    std::lock_guard wc_lock(node->wc_mu);
    if (!node->wc || !node->wc->dirty) return SyncAll();  // what an earlier commit made
  }
  CAPSULE_ASSIGN_OR_RETURN(WriteTicket ticket, gate_.EnterWrite());
  std::lock_guard wc_lock(node->wc_mu);
  CAPSULE_RETURN_IF_ERROR(CommitWorkingCopy(node, /*durable=*/true));  // the file, whoever wrote it
  h->wrote = false;
  return Status::Ok();
}

Handle* CapsuleFs::Register(std::unique_ptr<Handle> h) {
  std::lock_guard lock(handles_mu_);
  handles_.insert(h.get());
  return h.release();
}

std::unique_ptr<Handle> CapsuleFs::Unregister(Handle* raw) {
  std::lock_guard lock(handles_mu_);
  handles_.erase(raw);
  return std::unique_ptr<Handle>(raw);
}

void CapsuleFs::do_releasedir(Handle* h) { Unregister(h); }

void CapsuleFs::do_release(Handle* raw) {
  std::unique_ptr<Handle> h = Unregister(raw);
  if (!h->writer) return;
  Node* node = h->node.get();
  bool dirty = false;
  {
    std::lock_guard wc_lock(node->wc_mu);
    dirty = h->wrote && node->wc && node->wc->dirty;
  }
  Result<WriteTicket> ticket = dirty ? gate_.EnterWrite() : Result<WriteTicket>(WriteTicket(nullptr));
  std::lock_guard wc_lock(node->wc_mu);
  node->writers.erase(h.get());
  if (dirty && ticket.ok()) (void)CommitWorkingCopy(node);
  // The last writer gone: what was not committed (a refused spec, an unlinked file, a retired
  // mount) goes with it.
  if (node->writers.empty()) DropWorkingCopy(node);
}

}  // namespace capsule::fs
