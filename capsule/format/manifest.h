// manifest.json: the capsule's identity, its holder, and a digest of every other file.
//
// {"agent":{"id","name","owner"?},"files":{"<path>":{"sha256","size"}},"format":1,
//  "holder":{"epoch","machine"}} in canonical form. Every file of the capsule outside
// .capsule/, but manifest.json itself, is listed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"
#include "capsule/format/digest_cache.h"

namespace capsule {

struct AgentInfo {
  std::string id;
  std::string name;
  std::optional<std::string> owner;
};

struct FileDigest {
  std::string sha256;
  uint64_t size = 0;
  bool operator==(const FileDigest&) const = default;
  // The digest of a file whose bytes are `text` (one about to be written).
  static FileDigest OfText(std::string_view text);
};

struct Manifest {
  AgentInfo agent;
  std::string holder_machine;
  uint64_t holder_epoch = 0;
  std::map<std::string, FileDigest> files;

  Json ToJson() const;
  Result<std::string> ToCanonicalText() const;

  // Reads a manifest from its text; any fault is Corruption naming manifest.json.
  static Result<Manifest> Parse(std::string_view text);
  // The general reader Parse falls back to for a manifest not in the exact form
  // ToCanonicalText writes (tests compare the two).
  static Result<Manifest> ParseThroughJson(std::string_view text);
  static Result<Manifest> Load(const std::string& capsule_dir);
  // The same from the capsule folder held open (manifest.json reached without a link).
  static Result<Manifest> Load(const DirFd& folder);
  // Parse without keeping the files: the agent and holder of a manifest read and checked
  // whole as Parse reads it, of its entries only the journal's stored (a mover's stream needs
  // those: the journal's to know it unchanged from what a copy sent without reading it).
  static Result<Manifest> ParseHeader(std::string_view text);
  // Load, as ParseHeader reads.
  static Result<Manifest> LoadHeader(const std::string& capsule_dir);
  // Writes manifest.json through the durable-write path.
  Status Save(const std::string& capsule_dir) const;
  // The same, beneath the held capsule folder: a link in the manifest's place is replaced,
  // never followed.
  Status Save(const DirFd& folder) const;
};

// Hashes each listed path under `capsule_dir` into `manifest->files`; a path that no longer
// exists is taken out. With `growing`, the journal (which only grows) is hashed through
// DigestCache::Sha256GrowingFile: only what was appended since it last hashed it is read.
Status RefreshManifestEntries(const std::string& capsule_dir, const std::vector<std::string>& paths,
                              Manifest* manifest, DigestCache* growing = nullptr);
// The same beneath the folder held open: a link where a file belongs is refused naming it
// (InvalidArgument, "reached through a link"), never followed.
Status RefreshManifestEntries(const DirFd& folder, const std::vector<std::string>& paths, Manifest* manifest,
                              DigestCache* growing = nullptr);
// The digest of the file `path` beneath `folder`, nullopt when there is none; the journal
// through `growing` when given, as RefreshManifestEntries hashes it.
Result<std::optional<FileDigest>> DigestBeneath(const DirFd& folder, const std::string& path,
                                                DigestCache* growing = nullptr);

}  // namespace capsule
