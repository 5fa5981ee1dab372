#include "capsule/format/create.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <optional>
#include <utility>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/folder_modes.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/workspace.h"
#include "capsule/format/workspace_times.h"

namespace capsule {

namespace {

constexpr char kWorkingMemoryTemplate[] = "# Working memory\n";
constexpr char kVectorIndexTemplate[] = R"({"dimensions":0,"engine":"vector_index","entries":[]})";

// ok when `dir` does not exist or is an empty folder.
Status CheckAbsentOrEmpty(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IOError(dir, errno);
  }
  if (!S_ISDIR(st.st_mode)) return Status::AlreadyExists(dir, "exists and is not a folder");
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::IOError(dir, errno);
  bool empty = true;
  while (struct dirent* ent = ::readdir(d)) {
    std::string name = ent->d_name;
    if (name != "." && name != "..") empty = false;
  }
  ::closedir(d);
  if (!empty) return Status::AlreadyExists(dir, "is not empty");
  return Status::Ok();
}

// The path of `inner` relative to the folder `outer`, when it lies inside it (both resolved;
// `inner` need not exist yet, its folder must).
std::optional<std::string> PathInside(const std::string& inner, const std::string& outer) {
  std::string folder = RealPath(DirName(inner)), root = RealPath(outer);
  if (folder.empty() || root.empty()) return std::nullopt;
  std::string resolved = JoinPath(folder, BaseName(inner));
  if (resolved.rfind(root + "/", 0) != 0) return std::nullopt;
  return resolved.substr(root.size() + 1);
}

// The workspace at `source` into the capsule being built at `staging`, which becomes
// `final_dir`. A capsule made inside its own workspace never captures itself: the staging
// folder and the final folder are left out of what is read.
Status ImportWorkspace(const std::string& staging, const std::string& source, const std::string& final_dir,
                       Progress* progress) {
  const std::string& capsule_dir = staging;
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return Status::IOError(source, errno);
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(source, "workspace source is not a folder");
  std::vector<std::string> skip;
  for (const std::string& own : {staging, final_dir}) {
    if (std::optional<std::string> inside = PathInside(own, source)) skip.push_back(*inside);
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(source, skip));
  if (progress != nullptr) {
    uint64_t bytes = 0, files = 0;
    std::set<std::pair<uint64_t, uint64_t>> linked;  // a hard-linked file is stored once
    for (const TreeEntry& entry : entries) {
      if (entry.type != TreeEntry::Type::kFile) continue;
      if (entry.nlink > 1 && !linked.insert({entry.dev, entry.ino}).second) continue;
      bytes += entry.size, ++files;
    }
    progress->Begin("workspace", bytes, files);
  }
  Snapshot snapshot;
  WorkspaceTimes times;  // the source's modification times, kept
  // Hard links: the names of one inode become one link group, stored once.
  std::map<std::pair<uint64_t, uint64_t>, std::pair<uint64_t, std::string>> inodes;  // -> group, first path
  for (const TreeEntry& entry : entries) {
    std::string full = JoinPath(source, entry.path);
    SnapshotEntry item;
    times[entry.path] = entry.mtime;
    if (entry.type != TreeEntry::Type::kDirectory && entry.nlink > 1) {
      auto [it, fresh] = inodes.try_emplace({entry.dev, entry.ino}, inodes.size() + 1, entry.path);
      if (!fresh) {
        SnapshotEntry first = *snapshot.Find(it->second.second);
        first.link = it->second.first;
        snapshot.Set(it->second.second, first);
        snapshot.Set(entry.path, first);
        continue;
      }
    }
    switch (entry.type) {
      case TreeEntry::Type::kFile: {
        // Read beneath the source without following links: a folder swapped for a link after
        // the listing fails here rather than bringing in what lies outside.
        CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneath(source, entry.path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK));
        struct stat opened;
        if (::fstat(fd.get(), &opened) != 0) return Status::IOError(full, errno);
        if (!S_ISREG(opened.st_mode)) return Status::InvalidArgument(full, "changed while it was read: no longer a regular file");
        CAPSULE_ASSIGN_OR_RETURN(item.sha256, PutBlobFromFd(capsule_dir, fd.get(), &item.size));
        if (progress != nullptr) progress->Add(item.size, 1);
        item.mode = entry.mode & 0777;  // no setuid, setgid or sticky bits in a workspace
        break;
      }
      case TreeEntry::Type::kDirectory:
        item.type = SnapshotEntry::Type::kDirectory;
        item.mode = entry.mode & 0777;
        break;
      case TreeEntry::Type::kSymlink:
        // A link is data: its target is kept as written, wherever it points, and never read.
        item.type = SnapshotEntry::Type::kSymlink;
        item.target = entry.link_target;
        break;
      case TreeEntry::Type::kOther:
        // Metadata only: the name, mode and device number; a FIFO is never opened here.
        item.type = S_ISFIFO(entry.format)  ? SnapshotEntry::Type::kFifo
                    : S_ISSOCK(entry.format) ? SnapshotEntry::Type::kSocket
                    : S_ISCHR(entry.format)  ? SnapshotEntry::Type::kCharDevice
                    : S_ISBLK(entry.format)  ? SnapshotEntry::Type::kBlockDevice
                                             : SnapshotEntry::Type::kDirectory;
        if (item.type == SnapshotEntry::Type::kDirectory) return Status::InvalidArgument(full, "of an unknown type");
        item.mode = entry.mode & 0777;
        if (S_ISCHR(entry.format) || S_ISBLK(entry.format)) item.rdev = entry.rdev;
        break;
    }
    snapshot.Set(entry.path, std::move(item));
  }
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(capsule_dir, kLocalDir)));
  CAPSULE_RETURN_IF_ERROR(SaveWorkspaceTimes(JoinPath(capsule_dir, local::kTimes), times));
  return snapshot.Save(capsule_dir);
}

Status WriteLayout(const std::string& dir, const CreateOptions& options, const std::string& final_dir) {
  for (const char* sub : {"memory/vector_index", kBlobsDir, "environment"}) {
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(dir, sub)));
  }
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kWorkingMemoryPath), kWorkingMemoryTemplate));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kJournalPath), ""));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kVectorIndexPath), kVectorIndexTemplate));
  std::string spec = DefaultEnvironmentSpec();
  CAPSULE_RETURN_IF_ERROR(CheckEnvironmentSpec(spec));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(dir, kEnvironmentSpecPath), spec));
  if (options.workspace_source) return ImportWorkspace(dir, *options.workspace_source, final_dir, options.progress);
  return Snapshot().Save(dir);
}

}  // namespace

Result<Manifest> BuildManifest(const std::string& capsule_dir, const AgentInfo& agent,
                               const std::string& holder_machine, uint64_t holder_epoch) {
  Manifest manifest;
  manifest.agent = agent;
  manifest.holder_machine = holder_machine;
  manifest.holder_epoch = holder_epoch;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(capsule_dir, {kLocalDir}));
  std::vector<std::string> paths;
  for (const TreeEntry& entry : entries) {
    if (entry.type != TreeEntry::Type::kFile || !BelongsInManifest(entry.path)) continue;
    paths.push_back(entry.path);
  }
  CAPSULE_RETURN_IF_ERROR(RefreshManifestEntries(capsule_dir, paths, &manifest));
  return manifest;
}

void RemoveMadeParents(const std::vector<std::string>& made_parents) {
  for (auto it = made_parents.rbegin(); it != made_parents.rend(); ++it) ::rmdir(it->c_str());
}

Result<std::string> MakeStagingDir(const std::string& dir, std::vector<std::string>* made_parents) {
  std::string parent = DirName(dir);
  // The folders missing above `dir`, outermost first: made here, and taken away again by a
  // command refused after this.
  std::vector<std::string> made;
  for (std::string at = parent; !at.empty() && at != "/" && at != "."; at = DirName(at)) {
    struct stat st;
    if (::lstat(at.c_str(), &st) == 0 || DirName(at) == at) break;
    made.insert(made.begin(), at);
  }
  if (Status parents = MakeDirectories(parent); !parents.ok()) {
    RemoveMadeParents(made);
    return parents;
  }
  std::string pattern = JoinPath(parent, std::string(kTempPrefix) + BaseName(dir) + ".XXXXXX");
  if (::mkdtemp(pattern.data()) == nullptr) {
    Status failed = Status::IOError(parent, errno);
    RemoveMadeParents(made);
    return failed;
  }
  if (made_parents != nullptr) made_parents->insert(made_parents->end(), made.begin(), made.end());
  // 0700: only its owner enters a capsule folder; the mount shows the workspace with its own
  // modes and owners, and nothing inside is reached around it (capsule(5), ON-DISK MODES).
  ::chmod(pattern.c_str(), kCapsuleFolderMode);
  return pattern;
}

Status PlaceStagingDir(const std::string& staging, const std::string& dir) {
  CAPSULE_RETURN_IF_ERROR(CheckAbsentOrEmpty(dir));
  if (::rename(staging.c_str(), dir.c_str()) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST) return Status::AlreadyExists(dir, "is not empty");
    return Status::IOError(dir, errno);
  }
  return SyncDirectory(DirName(dir));
}

Status CreateCapsule(const std::string& dir, const CreateOptions& options) {
  CAPSULE_RETURN_IF_ERROR(CheckAgentId(options.agent.id));
  if (options.agent.name.empty()) return Status::InvalidArgument("agent name", "must not be empty");
  CAPSULE_RETURN_IF_ERROR(CheckAbsentOrEmpty(dir));
  std::vector<std::string> made_parents;
  CAPSULE_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir(dir, &made_parents));
  Status status = [&]() -> Status {
    StagingSync sync(staging);
    CAPSULE_RETURN_IF_ERROR(WriteLayout(staging, options, dir));
    CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(staging));
    HolderRecord holder{options.agent.id, machine, 1, HolderState::kActive, "", false};
    CAPSULE_RETURN_IF_ERROR(holder.Save(staging));
    CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, BuildManifest(staging, options.agent, machine, 1));
    CAPSULE_RETURN_IF_ERROR(manifest.Save(staging));
    CAPSULE_RETURN_IF_ERROR(sync.Finish());
    return PlaceStagingDir(staging, dir);
  }();
  if (!status.ok()) {
    (void)RemoveTree(staging);
    RemoveMadeParents(made_parents);  // a refused init leaves no folder
  }
  return status;
}

}  // namespace capsule
