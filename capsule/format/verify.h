// Offline verification of a capsule, as a folder or as an exported tar.
//
// Finds every missing, extra ("not in manifest"), truncated or altered file from the manifest
// alone; checks each blob against its name, the snapshot against the blobs, and the
// environment spec for secret values. Extra checks (the journal's chains) plug in through
// `VerifyHooks` so that this module does not depend on the journal.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/progress.h"
#include "capsule/base/status.h"
#include "capsule/format/digest_cache.h"
#include "capsule/format/manifest.h"
#include "capsule/format/workspace.h"

namespace capsule {

struct VerifyOptions {
  // Hex Ed25519 public key the export's signature (signature.json) must verify with: in a tar,
  // or in a folder extracted from one. A folder's signature.json is never a file of the
  // capsule, and is checked only when this is given.
  std::optional<std::string> public_key_hex;
  // Extra check of the journal, read through `journal` (its bytes by position: a folder's
  // file, or a tar's copy in memory); returns one line per problem.
  std::function<std::vector<std::string>(const ReadAtFunction& journal)> check_journal;
  // Threads hashing a folder's files; 0 means one per core.
  unsigned threads = 0;
  // Blobs (never rewritten) whose stat identity is unchanged since this cache hashed them are
  // not read again (folders only). For a mount re-verifying the capsule it serves; a cold
  // verify leaves it null and reads everything.
  DigestCache* blob_digests = nullptr;
  // With blob_digests: the blobs it remembers are taken as they were when it hashed them,
  // without a stat (DigestCache::Remembered), and the blobs folder is listed by name only;
  // the blobs it does not remember are read as usual. The journal is hashed through
  // DigestCache::Sha256GrowingFile (only what was appended since is read). For a mount's
  // freeze right after its preverify, when nothing but the mount has written the folder
  // since, and the mount never rewrites a blob and only appends to the journal.
  bool trust_remembered_blobs = false;
  // The documents checked by their content (the snapshot, the environment spec, schedules,
  // threads, skills) are read whole up to this size; a larger one is a problem ("too large
  // to check"), never passed over. The journal is checked whatever its size.
  uint64_t max_document_size = 256ull << 20;
  // Phase "verify": a folder's bytes and files hashed, of all; a tar's bytes read, of its size.
  Progress* progress = nullptr;
};

struct VerifyReport {
  std::vector<std::string> problems;  // "<path>: <what is wrong>", in path order
  // A folder's modes that expose more than capsule(5) allows (FolderModeWarnings): said, not
  // failed on.
  std::vector<std::string> warnings;
  size_t files_checked = 0;           // files listed in the manifest
  // A folder a mount serves: what its writes since its last checkpoint explain (a blob not
  // yet listed, a file as the mount last wrote it), said apart from the problems
  // (SetAsidePendingWrites, capsule/format/trust.h).
  std::vector<std::string> pending;
  std::optional<Manifest> manifest;   // when it could be read
  std::optional<std::string> signer;  // hex key of a good signature, when checked
  bool ok() const { return problems.empty(); }
};

// A fatal error (the folder cannot be read at all) is a Status; damage is in the report.
Result<VerifyReport> VerifyFolder(const std::string& dir, const VerifyOptions& options = {});

// The blobs folder as VerifySavedFolder reads it: the regular files' names (sorted), every
// other entry's name, and, with trust_remembered_blobs, what the digest cache remembers of
// each name (DigestCache::Remembered, in the order of `names`).
struct ListedBlobs {
  std::vector<std::string> names;
  std::vector<std::string> others;
  std::vector<std::optional<DigestCache::Digest>> remembered;
  // Takes out the blobs at `paths` (capsule paths, "artifacts/blobs/<name>"), as removed.
  void Remove(const std::vector<std::string>& paths);
};
// Listed beneath the capsule folder `root` holds, never through a link; the path form opens
// the folder first.
Result<ListedBlobs> ListBlobsToVerify(const DirFd& root, const VerifyOptions& options);
Result<ListedBlobs> ListBlobsToVerify(const std::string& dir, const VerifyOptions& options);

// A capsule as the one process that writes its folder has just saved it (a mount's
// checkpoint): the manifest and snapshot it holds, and the SHA-256 of the texts it wrote
// (texts that Manifest::Parse and Snapshot::Parse read back as these).
struct SavedCapsule {
  std::shared_ptr<const Manifest> manifest;
  std::string manifest_sha256;
  Snapshot snapshot;
  std::string snapshot_sha256;
  // The blobs folder listed while the rest was saved, after its last blob was written, the
  // blobs the save removed taken out; VerifySavedFolder lists the folder itself without it.
  std::optional<ListedBlobs> blobs;
};

// What VerifyFolder with `options` reports (the same problems, in the same order) for a
// folder whose manifest.json and artifacts/snapshot.json are the texts `saved` describes,
// found without parsing them again: each file is checked against its digest instead, and the
// snapshot held in memory is checked against the blobs. With trust_remembered_blobs (and
// blob_digests), a blob the cache remembers as named is neither read nor kept in a map: the
// cost is a listing of the blobs folder and a lookup a blob; without that trust every blob is
// listed and read as VerifyFolder reads it. Whenever the folder is not as saved (another
// manifest or snapshot, anything but regular files among the blobs with that trust), or with
// a public key, this is VerifyFolder. The report's manifest is set only when it is.
Result<VerifyReport> VerifySavedFolder(const std::string& dir, const SavedCapsule& saved,
                                       const VerifyOptions& options);
Result<VerifyReport> VerifyTar(const std::string& tar_path, const VerifyOptions& options = {});

// What was found at one path, to compare with the manifest.
struct ObservedFile {
  std::string sha256;
  uint64_t size = 0;
  // For the journal: the digest of its first N bytes, N being the manifest's size for it.
  std::string prefix_sha256;
};

// The journal only grows, so the manifest's digest of it covers its first `size` bytes; the
// events appended since are checked by the journal's own chain (VerifyOptions::check_journal).
bool IsAppendOnlyPath(const std::string& path);

// The non-blob files of a capsule folder against its manifest, as VerifyFolder compares them
// (missing, not in manifest, truncated, altered; an attachment whose name is not its digest),
// and the blobs the manifest lists by name only: a listed blob that is gone is "missing", a
// blob's bytes are never read. What a mount, a pack or a move checks before it trusts a
// capsule (capsule/format/trust.h): its cost is the non-blob files' bytes (of the journal, the
// part the manifest covers and what follows) and a listing of the blobs folder, never the
// workspace's content. The documents' content and the snapshot against the blobs are not
// checked here (capsule verify does).
struct NonBlobReport {
  std::vector<std::string> problems;            // "<path>: <what differs>", in path order
  std::vector<std::string> paths;               // the paths named by `problems`, once each, in order
  std::map<std::string, ObservedFile> files;    // the non-blob files found, as hashed
};
Result<NonBlobReport> VerifyNonBlobFiles(const std::string& dir, const Manifest& manifest);
// The same in the folder held open (nothing beneath it read through a link).
Result<NonBlobReport> VerifyNonBlobFiles(const DirFd& root, const Manifest& manifest);

// A blob found in a capsule: its digest (hex; a view of the caller's string) and size.
struct FoundBlob {
  std::string_view sha256;
  uint64_t size = 0;
};

// The snapshot's files against the blobs found (`blobs` in digest order, each once): its link
// groups agree (as Snapshot::Parse checks them), every file's blob is there with the file's
// size, and every blob but the empty one is named by a file. Appends one line per problem,
// worded as capsule verify words them.
void CheckSnapshotBlobs(const Snapshot& snapshot, const std::vector<FoundBlob>& blobs,
                        std::vector<std::string>* problems);

// The checks shared by folders and tars. `documents` holds the text of the small files the
// checks read (snapshot, environment spec, schedules, threads, skills) when they were found;
// `journal` reads the journal (empty when there is none), for VerifyOptions::check_journal.
// `snapshot_problems`, when given: the caller checked the snapshot (CheckSnapshotBlobs), and
// these are reported where the snapshot's problems would be.
void CheckAgainstManifest(const Manifest& manifest, const std::map<std::string, ObservedFile>& files,
                          const std::map<std::string, std::string>& documents, const ReadAtFunction& journal,
                          const VerifyOptions& options, std::vector<std::string>* problems,
                          const std::vector<std::string>* snapshot_problems = nullptr);

// The bytes an export signature covers: a fixed context line, then the manifest's text.
std::string ExportSignatureMessage(const std::string& manifest_text);

}  // namespace capsule
