// The capsule on disk: the names of its files and the rules for paths inside it.
// man/capsule.5 describes the same layout in prose.
#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "capsule/base/status.h"
#include "capsule/format/local_files.h"

namespace capsule {

inline constexpr int kCapsuleFormat = 1;

inline constexpr char kManifestPath[] = "manifest.json";
inline constexpr char kWorkingMemoryPath[] = "memory/working_memory.md";
inline constexpr char kJournalPath[] = "memory/timeline_events.jsonl";
inline constexpr char kVectorIndexPath[] = "memory/vector_index/index.json";
inline constexpr char kSnapshotPath[] = "artifacts/snapshot.json";
inline constexpr char kBlobsDir[] = "artifacts/blobs";
// Every blob's mode on disk, whatever the workspace file's mode: only the capsule's owner reads
// blobs; the mount shows each file with the mode and owner its snapshot entry gives (capsule(5)).
inline constexpr mode_t kBlobMode = 0600;
inline constexpr char kEnvironmentSpecPath[] = "environment/spec.json";
inline constexpr char kScheduleDir[] = "schedule";
// Written into an export only, beside the manifest, when the export is signed.
inline constexpr char kSignaturePath[] = "signature.json";
// Temporary files of the durable-write path start with this; they are debris, never content.
inline constexpr char kTempPrefix[] = ".tmp-";

// A plain relative path: not empty, no leading '/', no empty, "." or ".." component, no NUL.
bool IsPlainRelativePath(std::string_view path);

// InvalidArgument naming `path` when it is not plain.
Status CheckPlainRelativePath(std::string_view path, const std::string& what);

// The blob path of a digest: artifacts/blobs/<sha256>.
std::string BlobPath(const std::string& sha256_hex);

// True for artifacts/blobs/<64 lowercase hex>.
bool IsBlobPath(std::string_view path);

// True when the last component of `path` starts with kTempPrefix.
bool IsTempDebris(std::string_view path);

// Whether a file found in a capsule folder belongs in the manifest a checkpoint or a rebuild
// writes: not manifest.json itself, not the signature.json an export's extraction leaves
// beside it (it attests that export, not the state at rest: a manifest naming it could never
// be exported signed), not the temporary of a write a crash cut short.
bool BelongsInManifest(std::string_view path);

// Agent ids name folders and holder records: 1 to 128 of [A-Za-z0-9._-], not starting with '.'.
Status CheckAgentId(const std::string& id);

}  // namespace capsule
