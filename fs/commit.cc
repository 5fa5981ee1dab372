// Working copies and commits: how a write becomes visible whole, and the checkpoint that
// makes the files on disk (snapshot.json, manifest.json) current again.
#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <set>
#include <cstdlib>
#include <functional>
#include <future>
#include <iostream>
#include <mutex>
#include <thread>

#include "capsule/base/parallel.h"
#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/documents.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/trust.h"
#include "capsule/format/verify.h"
#include "fs/capsule_fs.h"
#include "fs/document_writes.h"
#include "fs/tree_undo.h"
#include "fs/errno_map.h"

namespace capsule::fs {
namespace {


Status CopyFd(int from, int to, uint64_t* copied, const std::string& what) {
  *copied = 0;
  for (;;) {
    ssize_t n = ::copy_file_range(from, nullptr, to, nullptr, 1 << 30, 0);
    if (n < 0 && (errno == EXDEV || errno == ENOSYS || errno == EINVAL)) break;
    if (n < 0) return Status::IOError(what, errno);
    if (n == 0) return Status::Ok();
    *copied += static_cast<uint64_t>(n);
  }
  std::vector<char> buffer(1 << 20);
  for (;;) {
    ssize_t n = ::read(from, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(what, errno);
    if (n == 0) return Status::Ok();
    CAPSULE_RETURN_IF_ERROR(WriteAll(to, std::string_view(buffer.data(), static_cast<size_t>(n)), what));
    *copied += static_cast<uint64_t>(n);
  }
}

// Renames the finished working copy `from` (in `work`) to `sha`, its content's name, in
// `blobs`: both folders held open since the mount began, so a link put in their place is
// never followed. Stored once by content: a blob already there has the same bytes, and `from`
// goes instead. One renameat2 where the file system has RENAME_NOREPLACE; a look first where
// it has not.
Status StoreAsBlob(const DirFd& work, const std::string& from, const DirFd& blobs, const std::string& sha) {
  if (::renameat2(work.get(), from.c_str(), blobs.get(), sha.c_str(), RENAME_NOREPLACE) == 0) return Status::Ok();
  int err = errno;
  if (err == EINVAL) {
    struct stat st;
    if (::fstatat(blobs.get(), sha.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
      if (::renameat(work.get(), from.c_str(), blobs.get(), sha.c_str()) != 0) return Status::IOError(blobs.PathOf(sha), errno);
      return Status::Ok();
    }
    err = EEXIST;
  }
  if (err != EEXIST) return Status::IOError(blobs.PathOf(sha), err);
  ::unlinkat(work.get(), from.c_str(), 0);
  return Status::Ok();
}

// A workspace file's blob is served only when its bytes hash to its name (`sha256`): checked
// as it is opened, through `cache` (a stat when its identity is unchanged since it was last
// hashed), so that a blob altered on disk, even under a running mount, answers EIO instead.
// Read beneath the blobs folder held open: a link put in a blob's place is refused, naming it.
Status CheckBlobBeforeServing(DigestCache* cache, const DirFd& blobs, const std::string& sha256) {
  const std::string path = blobs.PathOf(sha256);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, blobs.OpenFile(sha256, O_RDONLY));
  Result<std::string> digest = cache->Sha256Opened(fd.get(), path, nullptr);
  if (!digest.ok()) return digest.status();
  if (*digest != sha256) return Status::Corruption(path, "does not hash to its name: altered on disk, not served");
  return Status::Ok();
}

}  // namespace

Status CapsuleFs::EnsureWorkingCopy(Node* node, bool empty) {
  if (node->wc) {
    WorkingCopy& wc = *node->wc;
    if (empty) {
      if (::ftruncate(wc.fd.get(), 0) != 0) return Status::IOError(wc.path, errno);
      wc.size = 0;
      wc.dirty = true;
      wc.hash = std::make_shared<RunningHash>();
      clock_gettime(CLOCK_REALTIME, &wc.mtime);
    }
    return Status::Ok();
  }
  std::string source;  // the blob's name in blobs_, or the real file's path in folder_
  mode_t mode = 0644;
  struct timespec committed_mtime {};
  bool nothing_to_copy = false;  // an empty workspace file (a new one, say): no blob to open
  {
    std::shared_lock lock(tree_mu_);
    source = node->kind == NodeKind::kWsFile ? node->sha256 : RelPath(node);
    if (node->kind == NodeKind::kWsFile) mode = node->mode & 07777;
    nothing_to_copy = node->kind == NodeKind::kWsFile && node->size == 0;
    committed_mtime = node->mtime;
  }
  WorkingCopy wc;
  const std::string name = std::to_string(node->ino) + "-" + std::to_string(work_counter_++);
  wc.path = work_.PathOf(name);
  // Blobs are 0600 whatever the workspace file's mode: only the driver's user reads them on
  // disk; the mount shows each file with its own mode and owner (capsule(5)).
  CAPSULE_ASSIGN_OR_RETURN(wc.fd, work_.OpenFile(name, O_RDWR | O_CREAT | O_EXCL, 0600));
  if (node->kind == NodeKind::kRealFile) {
    Result<struct stat> st = folder_.Stat(source);
    if (st.ok()) mode = st->st_mode & 07777;
    ::fchmod(wc.fd.get(), mode);
  }
  if (empty) {
    wc.hash = std::make_shared<RunningHash>();
    wc.dirty = true;
    clock_gettime(CLOCK_REALTIME, &wc.mtime);
  } else {
    if (!nothing_to_copy) {
      if (node->kind == NodeKind::kWsFile) {
        CAPSULE_RETURN_IF_ERROR(CheckBlobBeforeServing(&verified_blobs_, blobs_, source));
      }
      CAPSULE_ASSIGN_OR_RETURN(UniqueFd from, node->kind == NodeKind::kWsFile ? blobs_.OpenFile(source, O_RDONLY)
                                                                                : folder_.OpenFile(source, O_RDONLY));
      CAPSULE_RETURN_IF_ERROR(CopyFd(from.get(), wc.fd.get(), &wc.size, wc.path));
    }
    // Written from its start, as tar -x and cp write a new file: hashed as it is written.
    if (wc.size == 0) wc.hash = std::make_shared<RunningHash>();
    wc.mtime = committed_mtime;  // unchanged until a write says otherwise
  }
  node->wc = std::make_unique<WorkingCopy>(std::move(wc));
  return Status::Ok();
}

void CapsuleFs::DropWorkingCopy(Node* node) {
  if (!node->wc) return;
  if (node->wc->dirty) ++node->content_resets;  // the kernel's cache holds writes that are gone
  ::unlinkat(work_.get(), BaseName(node->wc->path).c_str(), 0);
  node->wc.reset();
}

Result<std::shared_ptr<const UniqueFd>> CapsuleFs::CommittedFile(Node* node, Handle* h) {
  if (h->committed && h->committed_at == node->commits) return h->committed;
  bool blob;
  std::string path;
  {
    std::shared_lock lock(tree_mu_);
    blob = node->kind == NodeKind::kWsFile;
    path = blob ? node->sha256 : RelPath(node);
  }
  if (blob) CAPSULE_RETURN_IF_ERROR(CheckBlobBeforeServing(&verified_blobs_, blobs_, path));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, blob ? blobs_.OpenFile(path, O_RDONLY) : folder_.OpenFile(path, O_RDONLY));
  h->committed = std::make_shared<const UniqueFd>(std::move(fd));
  h->committed_at = node->commits;
  return h->committed;
}

Status CapsuleFs::LogChange(const WorkspaceChange& change, TreeUndo* undo) {
  ++generation_;
  Status logged = log_ ? log_->Append(change) : FsError(EROFS, "capsule mounted read-only");
  if (!logged.ok() && undo != nullptr) undo->Restore(&nodes_);
  return logged;
}

Status CapsuleFs::SyncLog() { return log_ ? log_->Sync() : Status::Ok(); }

Manifest& CapsuleFs::EditManifest() {
  if (manifest_.use_count() > 1) manifest_ = std::make_shared<Manifest>(*manifest_);
  return *manifest_;
}

Status CapsuleFs::SyncAll() {
  if (::syncfs(folder_.get()) != 0) return Status::IOError(options_.dir, errno);
  return Status::Ok();
}

Status CapsuleFs::CommitWorkingCopy(Node* node, bool durable) {
  if (node->kind == NodeKind::kRealFile) return CommitRealFile(node);
  if (!node->wc || !node->wc->dirty) return Status::Ok();
  WorkingCopy& wc = *node->wc;
  {
    std::shared_lock lock(tree_mu_);
    if (node->parent == nullptr) {  // unlinked while open: its content goes nowhere
      wc.dirty = false;
      return Status::Ok();
    }
  }
  if (durable && ::fsync(wc.fd.get()) != 0) return Status::IOError(wc.path, errno);
  std::string sha;
  uint64_t size = wc.size;
  if (wc.hash && wc.hash->queued() == wc.size) {
    sha = wc.hash->FinishHex();
  } else {
    CAPSULE_ASSIGN_OR_RETURN(sha, Sha256Fd(wc.fd.get(), wc.path, &size));
  }
  CAPSULE_RETURN_IF_ERROR(StoreAsBlob(work_, BaseName(wc.path), blobs_, sha));
  struct timespec mtime = wc.mtime;
  node->wc.reset();  // its file is the blob now; a later write copies the blob again
  ++node->commits;
  if (durable) {
    Status synced = blobs_.SyncDir();
    if (!synced.ok()) {
      blobs_listed_ = false;  // a blob on disk the manifest does not name: the next checkpoint lists them
      return synced;
    }
  }
  {
    std::unique_lock lock(tree_mu_);
    node->sha256 = sha;
    node->size = size;
    node->mtime = mtime;
    // The change time is the last write's (or a later utimens's), as stat showed it while the
    // file was open: a commit at close is no change of its own (git compares ctimes).
    node->ctime = Later(node->ctime, mtime);
    EditManifest().files[BlobPath(sha)] = FileDigest{sha, size};
    if (node->parent != nullptr) {
      WorkspaceChange change;
      RecordAllNames(node, &change);
      CAPSULE_RETURN_IF_ERROR(LogChange(change));
    }
  }
  return durable ? SyncLog() : Status::Ok();
}

Status CapsuleFs::CommitRealFile(Node* node) {
  if (!node->wc || !node->wc->dirty) return Status::Ok();
  WorkingCopy& wc = *node->wc;
  std::string rel;
  {
    std::shared_lock lock(tree_mu_);
    if (node->parent == nullptr) {
      wc.dirty = false;
      return Status::Ok();
    }
    rel = RelPath(node);
  }
  if (::fsync(wc.fd.get()) != 0) return Status::IOError(wc.path, errno);
  std::optional<FileDigest> written;
  // Refused (EINVAL): the old content stays, and the bytes written are kept aside for their
  // writer (RefuseCommit); the working copy stays while a writer has the file open, so that a
  // later write and close can still make the file whole and valid.
  if (IsCheckedWhenWritten(rel)) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadAll(FileReadAt(wc.fd.get(), wc.path)));
    Status checked = CheckWrittenDocument(rel, text);
    if (!checked.ok()) return RefuseCommit(rel, wc.path, checked);
    written = FileDigest::OfText(text);
  }
  // An attachment's bytes are those its name says.
  if (IsAttachmentsPath(rel)) {
    if (Status named = CheckAttachmentFile(wc.fd.get(), wc.path, rel); !named.ok()) return RefuseCommit(rel, wc.path, named);
  }
  if (!written) {
    written.emplace();
    CAPSULE_ASSIGN_OR_RETURN(written->sha256, Sha256Fd(wc.fd.get(), wc.path, &written->size));
  }
  // Known as this mount's before it is there: a crash's recovery takes it (trust.h).
  CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, rel, written));
  // Into the capsule folder held open, no link followed on the way (the working copy is
  // reached the same way: a .capsule swapped for a link fails the commit).
  CAPSULE_RETURN_IF_ERROR(folder_.Rename(std::string(local::kWorkDir) + "/" + BaseName(wc.path), rel));
  ForgetRejected(folder_, rel);
  node->wc.reset();
  ++node->commits;
  CAPSULE_RETURN_IF_ERROR(folder_.SyncDir(DirName(rel) == "." ? "" : DirName(rel)));
  std::unique_lock lock(tree_mu_);
  clock_gettime(CLOCK_REALTIME, &node->mtime);
  ++generation_;
  // What it wrote, not what is there now: bytes put in its place since are not sealed.
  EditManifest().files[rel] = *written;
  return Status::Ok();
}

Status CapsuleFs::CommitAll() {
  std::vector<std::shared_ptr<Node>> all;
  {
    std::shared_lock lock(tree_mu_);
    for (const auto& [ino, node] : nodes_) all.push_back(node);
  }
  Status first;
  for (const auto& node : all) {
    if (node->kind != NodeKind::kWsFile && node->kind != NodeKind::kRealFile) continue;
    std::lock_guard wc_lock(node->wc_mu);
    Status committed = CommitWorkingCopy(node.get());
    if (first.ok() && !committed.ok()) first = committed;
  }
  return first;
}

Status CapsuleFs::Checkpoint(SavedCapsule* saved, const VerifyOptions* verify) {
  const std::string& dir = options_.dir;
  // Every blob the snapshot names is on disk before the snapshot is: the file system syncs
  // while the tree is walked (no commit can come meanwhile, see the header).
  std::future<Status> blobs_synced = std::async(std::launch::async, [this] { return SyncAll(); });
  // The blobs folder holds every blob it will (but those removed below) and the verify's
  // listing of it is taken meanwhile, on the core the sync leaves idle.
  std::future<Result<ListedBlobs>> verify_listing;
  if (saved != nullptr && verify != nullptr && verify->blob_digests != nullptr && verify->trust_remembered_blobs) {
    verify_listing = std::async(std::launch::async, [&dir, verify] { return ListBlobsToVerify(dir, *verify); });
  }
  WorkspaceChange whole;
  WorkspaceInodes inodes;
  {
    std::shared_lock lock(tree_mu_);
    whole = WholeWorkspace();
    inodes = InodeTable();
  }
  WorkspaceTimes times = std::move(whole.times);
  Snapshot snapshot = SnapshotOf(std::move(whole));
  // The snapshot's text is built on a thread of its own while the blobs and files to list in
  // the manifest are found here.
  std::future<Result<std::string>> snapshot_text =
      std::async(std::launch::async, [&snapshot] { return snapshot.ToCanonicalText(); });
  // Deleted means deleted: the blobs the snapshot no longer names leave the manifest first,
  // then the disk, so that no export or move carries them and the manifest never names a
  // missing blob (a crash in between leaves an extra blob, which the next mount lists again
  // and the next checkpoint removes).
  // The first checkpoint of a mount lists the blobs on disk (a crash may have left one the
  // manifest does not name), and so does the one after any checkpoint or commit that failed
  // half-way; otherwise every blob on disk is one this mount put in its manifest.
  // Found while the snapshot's text is built.
  const bool listed = blobs_listed_.exchange(false);
  std::vector<std::string> unreferenced;
  if (listed) {
    std::shared_lock lock(tree_mu_);
    unreferenced = UnreferencedBlobsOf(*manifest_, snapshot);
  } else {
    CAPSULE_ASSIGN_OR_RETURN(unreferenced, UnreferencedBlobs(dir, snapshot));
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, folder_.ListTree("", {kLocalDir, kBlobsDir}));
  std::set<std::string> paths;
  for (const TreeEntry& entry : tree) {
    if (entry.type != TreeEntry::Type::kFile) continue;
    if (IsTempDebris(entry.path)) {
      (void)folder_.Unlink(entry.path);
    } else if (BelongsInManifest(entry.path)) {
      paths.insert(entry.path);
    }
  }
  paths.erase(kSnapshotPath);  // named by the digest of the text written
  CAPSULE_ASSIGN_OR_RETURN(std::string snapshot_bytes, snapshot_text.get());
  const FileDigest snapshot_digest = FileDigest::OfText(snapshot_bytes);
  // The snapshot and the times reach the disk on another thread while the manifest is brought
  // up to date and its text built here; the manifest, which names the snapshot's digest, is
  // renamed into place only once the snapshot is durable. Should that write fail, manifest_
  // is left naming a snapshot not written and without the blobs found unreferenced: nothing
  // but a checkpoint writes it, and the next one (blobs_listed_ is false) lists the blobs
  // folder and names everything afresh.
  std::future<Status> snapshot_saved = std::async(std::launch::async, [&]() -> Status {
    CAPSULE_RETURN_IF_ERROR(blobs_synced.get());
    CAPSULE_RETURN_IF_ERROR(RecordMountWrite(folder_, kSnapshotPath, snapshot_digest));  // ahead of its manifest
    CAPSULE_RETURN_IF_ERROR(folder_.WriteFileAtomic(kSnapshotPath, snapshot_bytes, 0644));
    CAPSULE_ASSIGN_OR_RETURN(std::string times_text, WorkspaceTimesText(times));
    CAPSULE_RETURN_IF_ERROR(folder_.WriteFileAtomic(local::kTimes, times_text, 0644));
    CAPSULE_ASSIGN_OR_RETURN(std::string inodes_text, WorkspaceInodesText(inodes));
    return folder_.WriteFileAtomic(local::kInodes, inodes_text, 0600);
  });
  std::shared_ptr<const Manifest> manifest;
  std::vector<std::string> edited_beside;
  {
    std::unique_lock lock(tree_mu_);
    Manifest& current = EditManifest();
    for (const auto& [path, digest] : current.files) {
      if (!IsBlobPath(path) && BelongsInManifest(path) && path != kSnapshotPath) paths.insert(path);
    }
    current.files.erase(kSignaturePath);  // named by a manifest an earlier checkpoint wrote
    for (const std::string& blob : unreferenced) current.files.erase(blob);
    // Only what this mount wrote is sealed (capsule/format/trust.h): a file edited beside it
    // keeps its old entry, and capsule verify names it until capsule accept takes it.
    CAPSULE_ASSIGN_OR_RETURN(
        edited_beside,
        RefreshMountWrites(folder_, std::vector<std::string>(paths.begin(), paths.end()), &current, &verified_blobs_));
    current.files[kSnapshotPath] = snapshot_digest;
    manifest = manifest_;
    ++generation_;
  }
  for (const std::string& edit : edited_beside) {
    std::string line = edit + ": not sealed (the manifest keeps its entry; capsule verify names it until capsule "
                              "accept takes it)";
    std::cerr << "capsulefs: " << dir << ": " << line << "\n";
    ::syslog(LOG_WARNING, "capsulefs: %s: %s", dir.c_str(), line.c_str());
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, manifest->ToCanonicalText());
  CAPSULE_RETURN_IF_ERROR(snapshot_saved.get());
  CAPSULE_RETURN_IF_ERROR(folder_.WriteFileAtomic(kManifestPath, manifest_text, 0644));
  CAPSULE_RETURN_IF_ERROR(ClearMountWrites(folder_));  // the manifest lists them now
  CAPSULE_RETURN_IF_ERROR(RemoveBlobs(dir, unreferenced));
  blobs_listed_ = true;
  if (saved != nullptr) {
    *saved = SavedCapsule{std::move(manifest), Sha256Hex(manifest_text), std::move(snapshot), snapshot_digest.sha256, {}};
    if (verify_listing.valid()) {
      // A listing that failed is taken again by the verify.
      if (Result<ListedBlobs> blobs = verify_listing.get(); blobs.ok()) {
        saved->blobs = std::move(blobs).value();
        saved->blobs->Remove(unreferenced);
      }
    }
  }
  return log_ ? log_->Truncate() : Status::Ok();
}

Status CapsuleFs::Shutdown() {
  MountState state = gate_.state();
  if (state == MountState::kReadOnly) return Status::Ok();
  // A journal line still without its newline is kept for whoever wrote it (capsulefs(8)).
  if (std::string line = journal_unfinished_->Take(); !line.empty()) (void)KeepRejected(folder_, kJournalPath, line);
  Status committed = state == MountState::kRetired ? Status::Ok() : CommitAll();
  Status checkpointed = Checkpoint();
  return committed.ok() ? checkpointed : committed;
}

}  // namespace capsule::fs
