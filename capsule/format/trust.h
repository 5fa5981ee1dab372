// Whether a capsule folder is trusted: its non-blob files are the ones its manifest lists,
// with the digests it lists (VerifyNonBlobFiles, capsule/format/verify.h). A mount, a pack, a
// move and a sidecar check this before they carry a capsule; a capsule edited behind its
// manifest is refused, naming each file and what differs, until `capsule accept` takes the
// edits on purpose (AcceptEdits, recorded in the journal by the command line).
//
// A mount writes files outside the workspace (notes, the environment spec, the snapshot at a
// checkpoint...) between two checkpoints, and a crash leaves them newer than the manifest.
// Before each such write it records the path and the digest it writes in
// .capsule/mount-writes.log (RecordMountWrite), emptied once a checkpoint has written the
// manifest (ClearMountWrites); its recovery excuses a file found as the last record for its
// path says (CheckTrustedForMount). Everything else that differs was edited outside any mount.
//
// Blobs are checked by their names as they are read (the mount at open, a pack as it sends),
// never here: this check costs the non-blob files, not the workspace.
//
// Thread-safety: RecordMountWrite may be called from any thread (each record is one append
// of one line); the rest are plain functions.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"
#include "capsule/format/verify.h"

namespace capsule {

// Ok when the non-blob files of `dir` are as its manifest (`manifest`, as loaded) lists them,
// or as a mount that crashed since its last checkpoint left them: a file that differs is
// excused when the last write a mount recorded for its path (RecordMountWrite) is what is
// found there, the file as it wrote it or gone as it removed it. Otherwise Corruption naming
// `dir`, each file and what differs, and how to take the edits on purpose (capsule accept).
Status CheckTrustedForMount(const std::string& dir, const Manifest& manifest);
// The same in the folder held open (a mount's): nothing beneath it is read through a link.
Status CheckTrustedForMount(const DirFd& folder, const Manifest& manifest);
// The same, reading the manifest of `dir`: for a capsule at rest (no mount running).
Status CheckTrusted(const std::string& dir);

// Records, durably, that a mount is about to leave the file at `path` (relative to `dir`) with
// `written` as its digest, or removed (nullopt). Called before the write.
Status RecordMountWrite(const DirFd& folder, const std::string& path, const std::optional<FileDigest>& written);

// A mount's checkpoint: each of `paths` beneath `folder` is hashed into `manifest` (as
// RefreshManifestEntries), but only when found as `manifest` already lists it or as the
// mount's own last recorded write (RecordMountWrite) left it, so that a file edited beside the
// mount by someone with write access to the folder is never sealed as the mount's own. Such a
// file keeps its old entry (or stays unlisted, or listed when removed), and is named in the
// result with what differs ("notes/plan.md: edited beside the mount, not written by it"), for
// the mount to log; `capsule verify` then names it, until `capsule accept` takes it. A link
// where a file belongs is never read: named the same way (with the path and "reached through
// a link"), its entry kept. The
// journal is sealed as found: others append to it beside a mount under its lock (journal.h),
// and verify checks its chain.
Result<std::vector<std::string>> RefreshMountWrites(const DirFd& folder, const std::vector<std::string>& paths,
                                                    Manifest* manifest, DigestCache* growing = nullptr);

// A verify of a folder a running mount serves checks its last checkpoint: the manifest on
// disk is the one that checkpoint wrote. Moves from `report->problems` to `report->pending`
// each problem the mount's writes since then explain, and only those: a blob that is not in
// the manifest or not named by the snapshot (the mount stores each commit as a blob, listed at
// its next checkpoint; its bytes are still checked against its name), and a non-blob file
// found as the mount's last recorded write (RecordMountWrite) left it, or gone as it removed
// it. Any other problem stays one.
void SetAsidePendingWrites(const DirFd& folder, VerifyReport* report);

// Forgets the mount's writes: called once a checkpoint's manifest lists them.
Status ClearMountWrites(const DirFd& folder);

// One file whose edits `capsule accept` takes: its manifest entry before and after (nullopt:
// not listed before, or gone now).
struct AcceptedEdit {
  std::string path;
  std::string why;  // what differed, as CheckTrusted named it
  std::optional<FileDigest> before, after;
};

// What AcceptEdits would take: every non-blob file that differs from the manifest, and the
// manifest's blob entries whose blob is gone. Empty when the capsule is trusted as it is.
Result<std::vector<AcceptedEdit>> FindEdits(const std::string& dir);

// Re-seals the manifest of `dir` to the files as they were found: each of `edits` (from
// FindEdits) takes its `after` digest, or leaves the manifest. `record` (the journal's event)
// runs first, under the mount lock; nothing is re-sealed if it fails. Refused
// (FailedPrecondition) while a capsulefs holds the folder.
Status AcceptEdits(const std::string& dir, const std::vector<AcceptedEdit>& edits,
                   const std::function<Status()>& record);

}  // namespace capsule
