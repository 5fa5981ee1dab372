// The agent's workspace: files stored once by content in artifacts/blobs/<sha256>, mapped by
// artifacts/snapshot.json from workspace path to entry.
//
// snapshot.json, canonical: {"<path>": entry}, where an entry is
//   a file:    {"mode": <permission bits>, "sha256": "<hex>", "size": <bytes>}
//   a folder:  {"mode": <permission bits>, "type": "dir"}
//   a link:    {"target": "<link text>", "type": "link"}
// Any entry may also hold "uid" and "gid" (numbers, as tar keeps them): its owner. Without
// them it belongs to whoever mounts the capsule.
// Paths are plain relative paths as the agent sees them under files/.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"

namespace capsule {

struct SnapshotEntry {
  // kFifo, kSocket and the devices are metadata only: a name, a mode, an owner (and the
  // device number), no content.
  enum class Type { kFile, kDirectory, kSymlink, kFifo, kSocket, kCharDevice, kBlockDevice };
  Type type = Type::kFile;
  std::string sha256;  // kFile
  uint64_t size = 0;   // kFile
  mode_t mode = 0644;  // permission bits; every type but kSymlink
  std::string target;  // kSymlink
  uint64_t rdev = 0;   // kCharDevice, kBlockDevice: the device number
  // Hard links: entries with the same nonzero `link` are one file under several names (same
  // type, content, mode and owner). 0: a name of its own.
  uint64_t link = 0;
  std::optional<uint32_t> uid, gid;  // absent: whoever mounts the capsule
  bool operator==(const SnapshotEntry&) const = default;
};

// The snapshot's name of a type ("file", "dir", "link", "fifo", "socket", "chr", "blk").
const char* SnapshotTypeName(SnapshotEntry::Type type);
// The S_IF* bits of a type.
mode_t SnapshotTypeBits(SnapshotEntry::Type type);

class Snapshot {
 public:
  Snapshot() = default;
  explicit Snapshot(std::map<std::string, SnapshotEntry> entries) : entries_(std::move(entries)) {}
  static Result<Snapshot> Parse(std::string_view text);
  // Parse is two readers. ParseCanonical reads only text exactly as ToCanonicalText writes it
  // (keys in order, plain ASCII strings, no escapes), without building a Json document, and
  // gives nullopt for anything else (it does not check link groups); ParseThroughJson reads
  // any JSON and says what is wrong. Tests compare the two.
  static std::optional<Snapshot> ParseCanonical(std::string_view text);
  static Result<Snapshot> ParseThroughJson(std::string_view text);
  static Result<Snapshot> Load(const std::string& capsule_dir);
  // The same from the capsule folder held open (the snapshot reached without a link).
  static Result<Snapshot> Load(const DirFd& folder);
  Result<std::string> ToCanonicalText() const;
  // The same text, built as a Json document first: the general path ToCanonicalText falls
  // back to for a string that needs escaping (tests compare the two).
  Result<std::string> ToCanonicalTextThroughJson() const;
  Status Save(const std::string& capsule_dir) const;

  const std::map<std::string, SnapshotEntry>& entries() const { return entries_; }
  const SnapshotEntry* Find(const std::string& path) const;
  void Set(const std::string& path, SnapshotEntry entry) { entries_[path] = std::move(entry); }
  void Remove(const std::string& path) { entries_.erase(path); }

 private:
  std::map<std::string, SnapshotEntry> entries_;
};

// The check Snapshot::Parse makes across entries: the names of a hard-link group agree on
// everything (type, content, mode, owner). For a snapshot built in memory.
Status CheckSnapshotLinkGroups(const Snapshot& snapshot);

// Stores the bytes read from `source_fd` as a blob, once by content; returns its digest and
// sets `*size`. A blob that is already there is kept as it is.
Result<std::string> PutBlobFromFd(const std::string& capsule_dir, int source_fd, uint64_t* size);
Result<std::string> PutBlob(const std::string& capsule_dir, std::string_view data);

// Puts the local file `source_path` into the workspace as `path` (blob plus snapshot entry),
// saving the snapshot. The manifest is the caller's to refresh.
Status PutWorkspaceFile(const std::string& capsule_dir, const std::string& path,
                        const std::string& source_path);

// Deleted content: the blobs under artifacts/blobs/ of `capsule_dir` (their capsule paths,
// artifacts/blobs/<sha256>) that no file of `snapshot` names. The empty blob, which every
// capsule keeps, is never one of them.
Result<std::vector<std::string>> UnreferencedBlobs(const std::string& capsule_dir, const Snapshot& snapshot);
// The same among the blobs `manifest` lists, without looking at the folder: for a caller that
// knows the manifest lists every blob on disk (a mount after its first checkpoint, which
// listed the folder; a staging area after its copy).
std::vector<std::string> UnreferencedBlobsOf(const Manifest& manifest, const Snapshot& snapshot);
// Whether `blob_path` (artifacts/blobs/<sha256>) is one no snapshot needs to name.
bool IsEmptyBlobPath(const std::string& blob_path);
// Unlinks `blob_paths` from `capsule_dir` and syncs the folder. A folder in use drops them
// from its manifest first (and saves it), so that the manifest never names a missing blob.
Status RemoveBlobs(const std::string& capsule_dir, const std::vector<std::string>& blob_paths);

// Reads workspace file `path` back, checking the blob against its digest.
Result<std::string> ReadWorkspaceFile(const std::string& capsule_dir, const std::string& path);

}  // namespace capsule
