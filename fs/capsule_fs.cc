// Opening a mount: the capsule's folder checked (its non-blob files as the manifest lists them,
// but for what a crashed mount wrote: capsule/format/trust.h) and recovered after a crash
// (blobs reconciled with the manifest, the change log replayed over the last snapshot), then
// the tree built.
#include <fcntl.h>
#include <limits.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <functional>

#include "capsule/base/file_io.h"
#include "capsule/format/harness.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/trust.h"
#include "capsule/format/workspace.h"
#include "fs/capsule_fs.h"
#include "fs/change_log.h"

namespace capsule::fs {

namespace {

// Reconciles the manifest's blob entries with artifacts/blobs/ after a crash: a blob placed
// just before the crash is listed, debris is removed.
Status ScanBlobs(const DirFd& blobs, Manifest* manifest) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, blobs.ListTree());
  std::set<std::string> present;
  for (const TreeEntry& entry : entries) {
    std::string rel = std::string(kBlobsDir) + "/" + entry.path;
    if (IsTempDebris(entry.path)) {
      (void)blobs.Unlink(entry.path);
    } else if (IsBlobPath(rel) && entry.type == TreeEntry::Type::kFile) {
      if (manifest->files.count(rel) == 0) {
        // Placed since the last checkpoint: after a power cut its content may not have
        // reached the disk, so it is kept only when it matches its name.
        uint64_t size = 0;
        Result<UniqueFd> fd = blobs.OpenFile(entry.path, O_RDONLY);
        Result<std::string> sha = fd.ok() ? Sha256Fd(fd->get(), blobs.PathOf(entry.path), &size) : fd.status();
        if (!sha.ok() || *sha != BaseName(rel)) {
          (void)blobs.Unlink(entry.path);
          continue;
        }
        manifest->files[rel] = FileDigest{*sha, size};
      }
      present.insert(rel);
    }
  }
  for (auto it = manifest->files.begin(); it != manifest->files.end();) {
    it = (IsBlobPath(it->first) && present.count(it->first) == 0) ? manifest->files.erase(it) : std::next(it);
  }
  return Status::Ok();
}

// The folders of a capsule the driver writes in, parents first.
constexpr const char* kOwnFolders[] = {"", kLocalDir, local::kWorkDir, "artifacts", kBlobsDir, kHarnessDir, kScheduleDir};

}  // namespace

Status CheckCapsuleFolders(const DirFd& root, bool allow_foreign_owner) {
  const uid_t me = ::geteuid();
  for (const char* rel : kOwnFolders) {
    Result<struct stat> st = root.Stat(rel);
    if (!st.ok() && st.status().code() == Code::kNotFound) continue;  // made below, by the driver
    if (!st.ok()) return st.status();
    const std::string shown = root.PathOf(rel);
    if (S_ISLNK(st->st_mode)) {
      return Status::InvalidArgument(shown, "is a link where a folder belongs; refused (the driver never writes through a link)");
    }
    if (!S_ISDIR(st->st_mode)) return Status::InvalidArgument(shown, "is not a folder; refused");
    if (allow_foreign_owner) continue;
    if (st->st_uid != me && st->st_uid != 0) {
      return Status::FailedPrecondition(shown, "owned by uid " + std::to_string(st->st_uid) + ", not by the mounting user (uid " +
                                                   std::to_string(me) + ") or root: refused, as its owner could change "
                                                   "where the driver writes (chown it, or mount with -o allow_foreign_owner)");
    }
    if ((st->st_mode & 022) != 0) {
      return Status::FailedPrecondition(shown, "writable by group or others: refused, as they could change where the driver "
                                               "writes (chmod go-w it, or mount with -o allow_foreign_owner)");
    }
  }
  return Status::Ok();
}

// The workspace's tree: the last snapshot and the change log over it (a line whose blob is not
// whole is not replayed). Both are dropped once the tree is built, before a checkpoint builds
// its own.
Status CapsuleFs::LoadWorkspace(bool writable) {
  // Read beneath the capsule folder held open: a link in the place of any of them is refused
  // naming it, never followed.
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(folder_));
  WorkspaceTimes times = LoadWorkspaceTimes(folder_, local::kTimes);
  std::string log_path = folder_.PathOf(local::kWorkspaceLog);
  Result<std::string> log_text = folder_.ReadFile(local::kWorkspaceLog);
  if (!log_text.ok() && log_text.status().code() != Code::kNotFound) return log_text.status();
  if (log_text.ok()) {
    const std::string& text = *log_text;
    const Manifest& manifest = *manifest_;
    std::function<bool(const SnapshotEntry&)> blob_ok = [&](const SnapshotEntry& entry) {
      auto it = manifest.files.find(BlobPath(entry.sha256));
      return it != manifest.files.end() && it->second.size == entry.size;
    };
    if (!writable) blob_ok = nullptr;
    CAPSULE_RETURN_IF_ERROR(ReplayChanges(text, &snapshot, blob_ok, &times).status());
  }
  if (writable) {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, folder_.OpenFile(local::kWorkspaceLog, O_WRONLY | O_CREAT | O_APPEND, 0600));
    CAPSULE_ASSIGN_OR_RETURN(ChangeLog * log, ChangeLog::Open(log_path, std::move(fd)));
    log_.reset(log);
  }
  return BuildTree(snapshot, times, LoadWorkspaceInodes(folder_, local::kInodes));
}

void CapsuleFs::SetSession(fuse_session* session) {
  entry_notifier_.reset();  // sends what it holds while the session is still there
  session_ = session;
  if (session != nullptr) entry_notifier_ = std::make_unique<EntryNotifier>(session);
}

Result<std::unique_ptr<CapsuleFs>> CapsuleFs::Open(const MountOptions& given) {
  MountOptions options = given;
  char resolved[PATH_MAX];
  if (::realpath(given.dir.c_str(), resolved) == nullptr) return Status::IOError(given.dir, errno);
  options.dir = resolved;
  if (!PathExists(JoinPath(options.dir, kManifestPath))) {
    return Status::InvalidArgument(given.dir, "not a capsule (no manifest.json)");
  }
  // Held from here on; a link where a folder of the capsule belongs is refused before anything
  // is read or written.
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::Open(options.dir));
  CAPSULE_RETURN_IF_ERROR(CheckCapsuleFolders(root, options.allow_foreign_owner));
  MountState state = MountState::kReadOnly;
  if (!options.read_only) {
    Result<HolderRecord> record = HolderRecord::Load(options.dir);
    if (record.ok() && record->state == HolderState::kActive) state = MountState::kActive;
    if (record.ok() && record->state == HolderState::kFrozen) state = MountState::kFrozen;
  }
  std::unique_ptr<CapsuleFs> fs(new CapsuleFs(options, state));
  fs->folder_ = std::move(root);
  const DirFd& root_fd = fs->folder_;
  const std::string& dir = fs->options_.dir;
  bool writable = state != MountState::kReadOnly;
  CAPSULE_ASSIGN_OR_RETURN(*fs->manifest_, Manifest::Load(root_fd));
  // Trusted before anything is served or re-sealed: a file edited behind the manifest outside
  // any mount is refused; what a crashed mount wrote since its last checkpoint is recovered.
  CAPSULE_RETURN_IF_ERROR(CheckTrustedForMount(root_fd, *fs->manifest_));
  if (writable) {
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir(kLocalDir, 0700));
    CAPSULE_RETURN_IF_ERROR(root_fd.RemoveTree(local::kWorkDir));
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir(local::kWorkDir, 0700));
    CAPSULE_ASSIGN_OR_RETURN(fs->work_, root_fd.OpenDir(local::kWorkDir));
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir(kScheduleDir, 0755));
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir(kHarnessDir, 0755));
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir("artifacts", 0755));
    CAPSULE_RETURN_IF_ERROR(root_fd.MakeDir(kBlobsDir, 0755));
    CAPSULE_ASSIGN_OR_RETURN(fs->blobs_, root_fd.OpenDir(kBlobsDir));
    CAPSULE_RETURN_IF_ERROR(PutBlob(dir, "").status());
    CAPSULE_RETURN_IF_ERROR(ScanBlobs(fs->blobs_, fs->manifest_.get()));
  } else if (Result<DirFd> blobs = root_fd.OpenDir(kBlobsDir); blobs.ok()) {
    fs->blobs_ = std::move(blobs).value();  // read from; a capsule without blobs has none to read
  }
  CAPSULE_RETURN_IF_ERROR(fs->LoadWorkspace(writable));
  if (writable) CAPSULE_RETURN_IF_ERROR(fs->Checkpoint());
  return fs;
}

}  // namespace capsule::fs
