#include "capsule/export.h"

#include <fcntl.h>
#include <unistd.h>

#include <set>

#include "capsule/canonical_json.h"
#include "capsule/create.h"
#include "capsule/file_io.h"
#include "capsule/holder.h"
#include "capsule/keys.h"
#include "capsule/layout.h"
#include "capsule/manifest.h"
#include "capsule/sha256.h"
#include "capsule/tar.h"

namespace capsule {

namespace {

constexpr size_t kChunk = 1 << 20;

Status Refuse(const std::string& path, const std::string& why) {
  return Status::Corruption(path, why + "; export refused (run capsule verify)");
}

Status StreamFile(const std::string& dir, const std::string& path, const FileDigest& expected,
                  uint64_t size, TarWriter* tar, std::vector<char>* buffer) {
  std::string full = JoinPath(dir, path);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(full, O_RDONLY));
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
    if (done == expected.size) {
      Sha256 copy = hasher;
      prefix_digest = copy.FinishHex();
    }
  }
  char extra;
  CAPSULE_ASSIGN_OR_RETURN(size_t more, ReadAt(fd.get(), &extra, 1, static_cast<off_t>(done), full));
  if (more != 0 && !IsAppendOnlyPath(path)) return Refuse(path, "size mismatch");
  if (prefix_digest != expected.sha256) return Refuse(path, "digest mismatch");
  return tar->EndFile();
}

}  // namespace

Status WriteCapsuleTar(const std::string& dir, const ExportOptions& options, ByteSink* sink) {
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, ReadFile(JoinPath(dir, kManifestPath)));
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Parse(manifest_text));
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(dir, {kLocalDir}));
  std::set<std::string> seen;
  for (const TreeEntry& entry : entries) {
    if (entry.path == kManifestPath || IsTempDebris(entry.path) || entry.type == TreeEntry::Type::kDirectory) continue;
    if (entry.type != TreeEntry::Type::kFile) return Refuse(entry.path, "not a regular file");
    if (!manifest.files.count(entry.path)) return Refuse(entry.path, "not in manifest");
    seen.insert(entry.path);
  }
  for (const auto& [path, digest] : manifest.files) {
    if (!seen.count(path)) return Refuse(path, "missing");
  }

  TarWriter tar(sink);
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kManifestPath, manifest_text));
  if (options.signing_key_path) {
    CAPSULE_ASSIGN_OR_RETURN(EvpPkeyPtr key, LoadPrivateKey(*options.signing_key_path, KeyType::kEd25519));
    CAPSULE_ASSIGN_OR_RETURN(std::string signature, Ed25519Sign(key.get(), ExportSignatureMessage(manifest_text)));
    CAPSULE_ASSIGN_OR_RETURN(std::string public_hex, PublicKeyHex(key.get()));
    Json json = {{"algorithm", "ed25519"}, {"public_key", public_hex}, {"signature", HexEncode(signature)}};
    CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(json, kSignaturePath));
    CAPSULE_RETURN_IF_ERROR(tar.AddFile(kSignaturePath, text));
  }
  std::vector<char> buffer(kChunk);
  for (const TreeEntry& entry : entries) {
    if (entry.path == kManifestPath || IsTempDebris(entry.path)) continue;
    if (entry.type == TreeEntry::Type::kDirectory) {
      CAPSULE_RETURN_IF_ERROR(tar.AddDirectory(entry.path, 0755));
    } else {
      CAPSULE_RETURN_IF_ERROR(StreamFile(dir, entry.path, manifest.files.at(entry.path), entry.size, &tar, &buffer));
    }
  }
  return tar.Finish();
}

Status ExportCapsule(const std::string& dir, const std::string& out_path, const ExportOptions& options) {
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile out, AtomicFile::Create(out_path, 0644));
  FdSink sink(out.fd(), out_path);
  CAPSULE_RETURN_IF_ERROR(WriteCapsuleTar(dir, options, &sink));
  return out.Commit();
}

namespace {

Status Unsafe(const TarEntry& entry, const std::string& why) {
  return Status::InvalidArgument("tar entry '" + entry.path + "'", why + "; nothing was placed");
}

// Checks one entry's path and type; the import takes only plain files and folders.
Status CheckImportEntry(const TarEntry& entry, std::set<std::string>* seen) {
  if (entry.path.empty() || entry.path.front() == '/') return Unsafe(entry, "absolute path");
  if (!IsPlainRelativePath(entry.path)) return Unsafe(entry, "unsafe path ('..', '.' or an empty component)");
  if (entry.path == kLocalDir || entry.path.rfind(std::string(kLocalDir) + "/", 0) == 0) {
    return Unsafe(entry, ".capsule/ is local to a machine and never imported");
  }
  if (IsTempDebris(entry.path)) return Unsafe(entry, "temporary file name");
  switch (entry.type) {
    case TarEntry::Type::kFile:
    case TarEntry::Type::kDirectory:
      break;
    case TarEntry::Type::kSymlink: {
      bool escapes = entry.link_target.empty() || entry.link_target.front() == '/' ||
                     entry.link_target.find("..") != std::string::npos;
      return Unsafe(entry, escapes ? "link to '" + entry.link_target + "' points outside the capsule"
                                   : "links have no place in a capsule");
    }
    case TarEntry::Type::kHardLink:
      return Unsafe(entry, "hard link to '" + entry.link_target + "' refused");
    case TarEntry::Type::kOther:
      return Unsafe(entry, std::string(TarTypeName(entry)) + " refused");
  }
  if (!seen->insert(entry.path).second) return Unsafe(entry, "duplicate entry");
  return Status::Ok();
}

Status ExtractInto(const std::string& tar_path, const std::string& staging) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(tar_path, O_RDONLY));
  FdSource source(fd.get(), tar_path);
  TarReader reader(&source);
  std::set<std::string> seen;
  std::vector<char> buffer(kChunk);
  for (;;) {
    TarEntry entry;
    CAPSULE_ASSIGN_OR_RETURN(bool more, reader.Next(&entry));
    if (!more) break;
    CAPSULE_RETURN_IF_ERROR(CheckImportEntry(entry, &seen));
    std::string full = JoinPath(staging, entry.path);
    if (entry.type == TarEntry::Type::kDirectory) {
      CAPSULE_RETURN_IF_ERROR(MakeDirectories(full));
      continue;
    }
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(full)));
    if (entry.path == kSignaturePath) continue;  // a signature attests the export, not the state at rest
    CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(full, 0644));
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, reader.ReadData(buffer.data(), buffer.size()));
      if (n == 0) break;
      CAPSULE_RETURN_IF_ERROR(file.Append(std::string_view(buffer.data(), n)));
    }
    CAPSULE_RETURN_IF_ERROR(file.CommitNoReplace());
  }
  return reader.ExpectOnlyZerosAfterEnd();
}

}  // namespace

Status ImportCapsule(const std::string& tar_path, const std::string& dir, const ImportOptions& options,
                     std::vector<std::string>* problems) {
  if (PathExists(dir)) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> existing, ListTree(dir));
    if (!existing.empty()) return Status::AlreadyExists(dir, "is not empty");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir(dir));
  Status status = [&]() -> Status {
    CAPSULE_RETURN_IF_ERROR(ExtractInto(tar_path, staging).WithContext(tar_path));
    CAPSULE_ASSIGN_OR_RETURN(VerifyReport report, VerifyFolder(staging, options.verify));
    if (!report.ok()) {
      if (problems != nullptr) *problems = report.problems;
      return Status::Corruption(tar_path, "does not verify (" + report.problems.front() +
                                              (report.problems.size() > 1 ? ", and more" : "") + "); nothing was placed");
    }
    Manifest manifest = std::move(*report.manifest);
    CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(staging));
    HolderRecord record{manifest.agent.id, machine, manifest.holder_epoch, HolderState::kRetired};
    if (options.adopt) {
      record.epoch = manifest.holder_epoch + 1;
      record.state = HolderState::kActive;
      manifest.holder_machine = machine;
      manifest.holder_epoch = record.epoch;
      CAPSULE_RETURN_IF_ERROR(manifest.Save(staging));
    }
    CAPSULE_RETURN_IF_ERROR(record.Save(staging));
    return PlaceStagingDir(staging, dir);
  }();
  if (!status.ok()) (void)RemoveTree(staging);
  return status;
}

}  // namespace capsule
