// Opening a mount: the capsule's folder checked (its non-blob files as the manifest lists them,
// but for what a crashed mount wrote: capsule/format/trust.h) and recovered after a crash
// (blobs reconciled with the manifest, the change log replayed over the last snapshot), then
// the tree built.
#include <limits.h>
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
Status ScanBlobs(const std::string& dir, Manifest* manifest) {
  std::string blobs = JoinPath(dir, kBlobsDir);
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(blobs));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(blobs));
  std::set<std::string> present;
  for (const TreeEntry& entry : entries) {
    std::string rel = std::string(kBlobsDir) + "/" + entry.path;
    if (IsTempDebris(entry.path)) {
      ::unlink(JoinPath(dir, rel).c_str());
    } else if (IsBlobPath(rel) && entry.type == TreeEntry::Type::kFile) {
      if (manifest->files.count(rel) == 0) {
        // Placed since the last checkpoint: after a power cut its content may not have
        // reached the disk, so it is kept only when it matches its name.
        uint64_t size = 0;
        Result<std::string> sha = Sha256File(JoinPath(dir, rel), &size);
        if (!sha.ok() || *sha != BaseName(rel)) {
          ::unlink(JoinPath(dir, rel).c_str());
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

}  // namespace

// The workspace's tree: the last snapshot and the change log over it (a line whose blob is not
// whole is not replayed). Both are dropped once the tree is built, before a checkpoint builds
// its own.
Status CapsuleFs::LoadWorkspace(bool writable) {
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(options_.dir));
  WorkspaceTimes times = LoadWorkspaceTimes(JoinPath(options_.dir, local::kTimes));
  std::string log_path = JoinPath(options_.dir, local::kWorkspaceLog);
  if (PathExists(log_path)) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(log_path));
    const Manifest& manifest = *manifest_;
    std::function<bool(const SnapshotEntry&)> blob_ok = [&](const SnapshotEntry& entry) {
      auto it = manifest.files.find(BlobPath(entry.sha256));
      return it != manifest.files.end() && it->second.size == entry.size;
    };
    if (!writable) blob_ok = nullptr;
    CAPSULE_RETURN_IF_ERROR(ReplayChanges(text, &snapshot, blob_ok, &times).status());
  }
  if (writable) {
    CAPSULE_ASSIGN_OR_RETURN(ChangeLog * log, ChangeLog::Open(log_path));
    log_.reset(log);
  }
  return BuildTree(snapshot, times);
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
  MountState state = MountState::kReadOnly;
  if (!options.read_only) {
    Result<HolderRecord> record = HolderRecord::Load(options.dir);
    if (record.ok() && record->state == HolderState::kActive) state = MountState::kActive;
    if (record.ok() && record->state == HolderState::kFrozen) state = MountState::kFrozen;
  }
  std::unique_ptr<CapsuleFs> fs(new CapsuleFs(options, state));
  const std::string& dir = fs->options_.dir;
  bool writable = state != MountState::kReadOnly;
  CAPSULE_ASSIGN_OR_RETURN(*fs->manifest_, Manifest::Load(dir));
  // Trusted before anything is served or re-sealed: a file edited behind the manifest outside
  // any mount is refused; what a crashed mount wrote since its last checkpoint is recovered.
  CAPSULE_RETURN_IF_ERROR(CheckTrustedForMount(dir, *fs->manifest_));
  if (writable) {
    CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(dir, local::kWorkDir)));
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(dir, local::kWorkDir)));
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(dir, kScheduleDir)));
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(dir, kHarnessDir)));
    CAPSULE_RETURN_IF_ERROR(PutBlob(dir, "").status());
    CAPSULE_RETURN_IF_ERROR(ScanBlobs(dir, fs->manifest_.get()));
  }
  CAPSULE_RETURN_IF_ERROR(fs->LoadWorkspace(writable));
  if (writable) CAPSULE_RETURN_IF_ERROR(fs->Checkpoint());
  return fs;
}

}  // namespace capsule::fs
