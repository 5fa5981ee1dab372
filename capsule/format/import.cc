#include "capsule/format/import.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <set>

#include "capsule/base/file_io.h"
#include "capsule/base/tar.h"
#include "capsule/format/create.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"

namespace capsule {

namespace {

constexpr size_t kChunk = 1 << 20;  // bytes read from the tar at a time

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
    case TarEntry::Type::kSymlink:
      // The workspace's links are entries of artifacts/snapshot.json; the capsule's own folder
      // holds none, so a link in its tar is never placed (nor followed).
      return Unsafe(entry, "link to '" + entry.link_target +
                               "': a capsule's folder holds no links (the workspace's are entries of " +
                               kSnapshotPath + ")");
    case TarEntry::Type::kHardLink:
      return Unsafe(entry, "hard link to '" + entry.link_target + "' refused");
    case TarEntry::Type::kFifo:
    case TarEntry::Type::kCharDevice:
    case TarEntry::Type::kBlockDevice:
    case TarEntry::Type::kOther:
      // The workspace's FIFOs and devices are entries of the snapshot, never nodes of the folder.
      return Unsafe(entry, std::string(TarTypeName(entry)) + " refused");
  }
  if (!seen->insert(entry.path).second) return Unsafe(entry, "duplicate entry");
  return Status::Ok();
}

Status ExtractInto(const std::string& tar_path, const std::string& staging, Progress* progress) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(tar_path, O_RDONLY));
  FdSource file_source(fd.get(), tar_path);
  CountingSource source(&file_source, progress);
  if (progress != nullptr) {
    struct stat st;
    progress->Begin("extract", ::fstat(fd.get(), &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : 0, 0);
  }
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
    if (progress != nullptr) progress->Add(0, 1);
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
  std::vector<std::string> made_parents;
  CAPSULE_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir(dir, &made_parents));
  Status status = [&]() -> Status {
    StagingSync sync(staging);
    CAPSULE_RETURN_IF_ERROR(ExtractInto(tar_path, staging, options.verify.progress).WithContext(tar_path));
    CAPSULE_ASSIGN_OR_RETURN(VerifyReport report, VerifyFolder(staging, options.verify));
    if (!report.ok()) {
      if (problems != nullptr) *problems = report.problems;
      return Status::Corruption(tar_path, "does not verify (" + report.problems.front() +
                                              (report.problems.size() > 1 ? ", and more" : "") + "); nothing was placed");
    }
    Manifest manifest = std::move(*report.manifest);
    CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(staging));
    HolderRecord record{manifest.agent.id, machine, manifest.holder_epoch, HolderState::kRetired, "", false};
    if (options.adopt) {
      record.epoch = manifest.holder_epoch + 1;
      record.state = HolderState::kActive;
      manifest.holder_machine = machine;
      manifest.holder_epoch = record.epoch;
      CAPSULE_RETURN_IF_ERROR(manifest.Save(staging));
    }
    CAPSULE_RETURN_IF_ERROR(record.Save(staging));
    CAPSULE_RETURN_IF_ERROR(sync.Finish());
    return PlaceStagingDir(staging, dir);
  }();
  if (!status.ok()) {
    (void)RemoveTree(staging);
    RemoveMadeParents(made_parents);  // a refused import leaves no folder
  }
  return status;
}

}  // namespace capsule
