#include "capsule/format/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/output_file.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/format/create.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/holder.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/verify.h"

namespace capsule {

namespace {

constexpr size_t kChunk = 1 << 20;

Status Refuse(const std::string& path, const std::string& why) {
  return Status::Corruption(path, why + "; export refused (run capsule verify)");
}

Status StreamFile(const std::string& dir, const std::string& path, const FileDigest& expected,
                  uint64_t size, TarWriter* tar, std::vector<char>* buffer, Progress* progress) {
  std::string full = JoinPath(dir, path);
  // Beneath the capsule folder: a link put where a listed file was is refused, never read.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathGiven(dir, path, O_RDONLY));
  ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
  // An append-only file (the journal) may have grown past the part its digest covers.
  if (!IsAppendOnlyPath(path) || size < expected.size) size = expected.size;
  CAPSULE_RETURN_IF_ERROR(tar->BeginFile(path, size, 0644));
  Sha256 hasher;
  std::string prefix_digest = expected.size == 0 ? Sha256().FinishHex() : "";
  uint64_t done = 0;
  while (done < size) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(buffer->size(), size - done));
    if (done < expected.size) want = static_cast<size_t>(std::min<uint64_t>(want, expected.size - done));
    CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd.get(), buffer->data(), want, static_cast<off_t>(done), full));
    if (n == 0) return Refuse(path, "truncated");
    std::string_view chunk(buffer->data(), n);
    hasher.Update(chunk);
    CAPSULE_RETURN_IF_ERROR(tar->WriteFileData(chunk));
    done += n;
    if (progress != nullptr) progress->Add(n, 0);
    if (done == expected.size) {
      Sha256 copy = hasher;
      prefix_digest = copy.FinishHex();
    }
  }
  char extra;
  CAPSULE_ASSIGN_OR_RETURN(size_t more, ReadAt(fd.get(), &extra, 1, static_cast<off_t>(done), full));
  if (more != 0 && !IsAppendOnlyPath(path)) return Refuse(path, "size mismatch");
  if (prefix_digest != expected.sha256) return Refuse(path, "digest mismatch");
  if (progress != nullptr) progress->Add(0, 1);
  return tar->EndFile();
}

}  // namespace

Status WriteCapsuleTar(const std::string& dir, const ExportOptions& options, ByteSink* sink) {
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, ReadFileBeneath(dir, kManifestPath));
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Parse(manifest_text));
  // A secret never leaves in an export: a spec carrying a secret value is refused, as verify refuses it.
  if (manifest.files.count(kEnvironmentSpecPath)) {
    CAPSULE_ASSIGN_OR_RETURN(std::string spec, ReadFile(JoinPath(dir, kEnvironmentSpecPath)));
    if (Status checked = CheckEnvironmentSpec(spec); !checked.ok()) {
      return Status::Make(checked.code(), "", checked.message() + "; a secret never leaves in an export: export refused");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(dir, {kLocalDir}));
  std::set<std::string> seen;
  uint64_t total_bytes = 0;
  for (const TreeEntry& entry : entries) {
    if (entry.path == kManifestPath || IsTempDebris(entry.path) || entry.type == TreeEntry::Type::kDirectory) continue;
    // An earlier export's signature, in a folder extracted from it: not the capsule's.
    if (entry.path == kSignaturePath && !manifest.files.count(entry.path)) continue;
    if (entry.type != TreeEntry::Type::kFile) return Refuse(entry.path, "not a regular file");
    auto listed = manifest.files.find(entry.path);
    if (listed == manifest.files.end()) return Refuse(entry.path, "not in manifest");
    seen.insert(entry.path);
    // What StreamFile writes: the journal as it is now, when it has grown.
    total_bytes += IsAppendOnlyPath(entry.path) ? std::max(entry.size, listed->second.size) : listed->second.size;
  }
  if (options.progress != nullptr) options.progress->Begin("export", total_bytes, seen.size());
  for (const auto& [path, digest] : manifest.files) {
    if (!seen.count(path)) return Refuse(path, "missing");
  }

  TarWriter tar(sink);
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kManifestPath, manifest_text));
  if (options.signing_key_path) {
    if (manifest.files.count(kSignaturePath)) {
      return Refuse(kSignaturePath, "is listed by the manifest as a file of the capsule; a signed export would carry "
                                    "two (export it unsigned)");
    }
    CAPSULE_ASSIGN_OR_RETURN(EvpPkeyPtr key, LoadPrivateKey(*options.signing_key_path, KeyType::kEd25519));
    CAPSULE_ASSIGN_OR_RETURN(std::string signature, Ed25519Sign(key.get(), ExportSignatureMessage(manifest_text)));
    CAPSULE_ASSIGN_OR_RETURN(std::string public_hex, PublicKeyHex(key.get()));
    Json json = {{"algorithm", "ed25519"}, {"public_key", public_hex}, {"signature", HexEncode(signature)}};
    CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(json, kSignaturePath));
    CAPSULE_RETURN_IF_ERROR(tar.AddFile(kSignaturePath, text));
  }
  std::vector<char> buffer(kChunk);
  for (const TreeEntry& entry : entries) {
    bool left_out = entry.type != TreeEntry::Type::kDirectory && !seen.count(entry.path);  // an old signature
    if (entry.path == kManifestPath || IsTempDebris(entry.path) || left_out) continue;
    if (entry.type == TreeEntry::Type::kDirectory) {
      CAPSULE_RETURN_IF_ERROR(tar.AddDirectory(entry.path, 0755));
    } else {
      CAPSULE_RETURN_IF_ERROR(StreamFile(dir, entry.path, manifest.files.at(entry.path), entry.size, &tar, &buffer,
                                         options.progress));
    }
  }
  return tar.Finish();
}

Status ExportCapsule(const std::string& dir, const std::string& out_path, const ExportOptions& options) {
  if (out_path != "-") {
    std::string capsule = RealPath(dir), folder = RealPath(DirName(out_path));
    if (!capsule.empty() && (folder == capsule || folder.rfind(capsule + "/", 0) == 0)) {
      return Status::InvalidArgument(out_path, "is inside the capsule " + dir +
                                                   " it exports; it would be taken for part of it");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(OutputFile out, OutputFile::Open(out_path, 0644));
  CAPSULE_RETURN_IF_ERROR(WriteCapsuleTar(dir, options, out.sink()));
  return out.Commit();
}

}  // namespace capsule
