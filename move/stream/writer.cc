#include "move/stream/writer.h"

#include <fcntl.h>
#include <sys/sysmacros.h>

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/base/version.h"
#include "capsule/format/attachments.h"
#include "capsule/format/harness.h"
#include "capsule/format/holder.h"
#include "capsule/format/schedule.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/workspace.h"
#include "move/stream/digest_check.h"

namespace capsule::move {

namespace {

// One entry of the stream, before it is written.
struct Planned {
  enum class Kind { kFolder, kFile, kLink, kHardLink, kSpecial } kind = Kind::kFile;
  std::string stream_path;
  std::string source;       // kFile: the file to read, under the capsule folder; a workspace
                            // file's blob when empty (named when sent: most are not)
  std::string sha256;       // kFile
  uint64_t size = 0;        // kFile
  mode_t mode = 0644;
  std::string link_target;  // kLink; kHardLink: the stream path of the group's first name
  uint64_t link = 0;        // the snapshot's link group: never skipped for the receiver's have
  TarEntry special;         // kSpecial: a FIFO or a device node
  std::string inline_data;  // kFile whose bytes were rewritten (canonical jobs)
  bool has_inline = false;
  bool whole = false;       // sent whatever the receiver's have says: harness/ is replaced whole
  std::optional<uint32_t> uid, gid;  // workspace entries: the owner, when the snapshot names one
};

// The owner records of a planned entry (none when the snapshot names no owner).
std::map<std::string, std::string> OwnerRecords(const Planned& item) {
  std::map<std::string, std::string> pax;
  if (item.uid) pax[kUidRecord] = std::to_string(*item.uid);
  if (item.gid) pax[kGidRecord] = std::to_string(*item.gid);
  return pax;
}

void AddFolders(const std::string& path, std::map<std::string, Planned>* plan) {
  std::string dir = DirName(path);
  while (dir != "." && !plan->count(dir)) {
    Planned folder;
    folder.kind = Planned::Kind::kFolder;
    folder.stream_path = dir;
    folder.mode = 0755;
    (*plan)[dir] = folder;
    dir = DirName(dir);
  }
}

Status PlanFile(const std::string& dir, const std::string& capsule_path, const std::string& stream_path,
                std::map<std::string, Planned>* plan) {
  Planned file;
  file.stream_path = stream_path;
  file.source = JoinPath(dir, capsule_path);
  if (capsule_path.rfind(std::string(kScheduleDir) + "/", 0) == 0 ||
      capsule_path.rfind(std::string(kThreadsDir) + "/", 0) == 0) {
    // Jobs, day.json and thread files travel in canonical form; an empty one (created, never
    // written) counts as absent.
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(file.source));
    if (text.empty()) return Status::Ok();
    CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, capsule_path));
    CAPSULE_ASSIGN_OR_RETURN(file.inline_data, CanonicalJson(json, capsule_path));
    file.has_inline = true;
    file.size = file.inline_data.size();
    file.sha256 = Sha256Hex(file.inline_data);
  } else {
    CAPSULE_ASSIGN_OR_RETURN(file.sha256, Sha256File(file.source, &file.size));
  }
  AddFolders(stream_path, plan);
  (*plan)[stream_path] = std::move(file);
  return Status::Ok();
}

Result<std::map<std::string, Planned>> PlanStream(const std::string& dir, Phase phase) {
  std::map<std::string, Planned> plan;
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(dir));
  Planned root;
  root.kind = Planned::Kind::kFolder;
  root.stream_path = "files";
  root.mode = 0755;
  plan["files"] = root;
  std::map<uint64_t, std::string> first_names;  // link group -> stream path of its first name
  std::string last_folder;
  for (const auto& [path, entry] : snapshot.entries()) {
    Planned item;
    item.stream_path = "files/" + path;
    item.mode = entry.mode;
    item.uid = entry.uid;
    item.gid = entry.gid;
    switch (entry.type) {
      case SnapshotEntry::Type::kDirectory:
        item.kind = Planned::Kind::kFolder;
        break;
      case SnapshotEntry::Type::kFile:
        item.sha256 = entry.sha256;
        item.size = entry.size;
        break;
      case SnapshotEntry::Type::kSymlink:
        item.kind = Planned::Kind::kLink;
        item.link_target = entry.target;
        CAPSULE_RETURN_IF_ERROR(CheckStreamLink(item.stream_path, entry.target, phase));
        break;
      case SnapshotEntry::Type::kFifo:
      case SnapshotEntry::Type::kCharDevice:
      case SnapshotEntry::Type::kBlockDevice:
        item.kind = Planned::Kind::kSpecial;
        item.special.path = item.stream_path;
        item.special.mode = entry.mode;
        item.special.type = entry.type == SnapshotEntry::Type::kFifo         ? TarEntry::Type::kFifo
                            : entry.type == SnapshotEntry::Type::kCharDevice ? TarEntry::Type::kCharDevice
                                                                             : TarEntry::Type::kBlockDevice;
        item.special.dev_major = major(entry.rdev);
        item.special.dev_minor = minor(entry.rdev);
        break;
      case SnapshotEntry::Type::kSocket:
        continue;  // as with tar: a socket is a live process's, and no process travels
    }
    if (entry.link != 0 && entry.type == SnapshotEntry::Type::kFile) {
      // A hard link: its first name travels as what it is, every later one as a tar hard link
      // naming it (the spec's "earlier regular file of the same stream"). Hard-linked links,
      // FIFOs and devices travel as separate names.
      item.link = entry.link;
      auto [first, fresh] = first_names.emplace(entry.link, item.stream_path);
      if (!fresh) {
        item.kind = Planned::Kind::kHardLink;
        item.link_target = first->second;
      }
    }
    // Entries in path order share their folder in runs: its folders are planned once a run.
    const std::string_view folder = std::string_view(item.stream_path).substr(0, item.stream_path.rfind('/'));
    if (folder != last_folder) {
      AddFolders(item.stream_path, &plan);
      last_folder = folder;
    }
    std::string key = item.stream_path;
    plan.insert_or_assign(plan.end(), std::move(key), std::move(item));  // in path order
  }
  if (phase == Phase::kFiles) return plan;
  for (const char* capsule_path : {kWorkingMemoryPath, kJournalPath, kVectorIndexPath, kEnvironmentSpecPath}) {
    CAPSULE_RETURN_IF_ERROR(PlanFile(dir, capsule_path, *StreamPathOfCapsuleFile(capsule_path), &plan));
  }
  // Attachments, each once by its digest (skipped when the receiver holds it).
  if (PathExists(JoinPath(dir, kAttachmentsDir))) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(JoinPath(dir, kAttachmentsDir)));
    for (const TreeEntry& entry : tree) {
      std::string path = std::string(kAttachmentsDir) + "/" + entry.path;
      if (entry.type != TreeEntry::Type::kFile || IsTempDebris(path) || entry.path.find('/') != std::string::npos) continue;
      CAPSULE_RETURN_IF_ERROR(PlanFile(dir, path, path, &plan));
    }
  }
  // Instructions, skills and threads, always whole: the receiver replaces them with what the
  // stream holds, so every file is sent even when the receiver holds it the same.
  if (PathExists(JoinPath(dir, kHarnessDir))) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(JoinPath(dir, kHarnessDir)));
    for (const TreeEntry& entry : tree) {
      std::string path = std::string(kHarnessDir) + "/" + entry.path;
      if (entry.type != TreeEntry::Type::kFile || IsTempDebris(path) || !IsHarnessPath(path)) continue;
      CAPSULE_RETURN_IF_ERROR(PlanFile(dir, path, path, &plan));
      if (auto planned = plan.find(path); planned != plan.end()) planned->second.whole = true;
    }
  }
  if (phase == Phase::kSwitch && PathExists(JoinPath(dir, kScheduleDir))) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> jobs, ListTree(JoinPath(dir, kScheduleDir)));
    for (const TreeEntry& job : jobs) {
      if (job.type != TreeEntry::Type::kFile || IsTempDebris(job.path)) continue;
      std::string path = std::string(kScheduleDir) + "/" + job.path;
      CAPSULE_RETURN_IF_ERROR(PlanFile(dir, path, path, &plan));
    }
  }
  return plan;
}

// Sends one file. Its digest is checked on another thread, behind the sending (the caller
// asks `digests` before it ends the stream), unless it is a blob and `hash_blobs` is off.
Status WriteFileEntry(const std::string& dir, const Planned& file, bool hash_blobs, TarWriter* tar,
                      DigestCheck* digests, Progress* progress) {
  std::map<std::string, std::string> pax = OwnerRecords(file);
  pax[kDigestRecord] = file.sha256;
  CAPSULE_RETURN_IF_ERROR(tar->BeginFile(file.stream_path, file.size, file.mode, pax));
  if (file.has_inline) {
    CAPSULE_RETURN_IF_ERROR(tar->WriteFileData(file.inline_data));
    if (progress != nullptr) progress->Add(file.inline_data.size(), 1);
    return tar->EndFile();
  }
  const std::string source = file.source.empty() ? JoinPath(dir, BlobPath(file.sha256)) : file.source;
  const bool hash = hash_blobs || !file.source.empty();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(source, O_RDONLY));
  uint64_t done = 0;
  while (done < file.size) {
    DigestCheck::Buffer* buffer = digests->Take();
    size_t want = static_cast<size_t>(std::min<uint64_t>(buffer->size(), file.size - done));
    Result<size_t> n = ReadAt(fd.get(), buffer->data(), want, static_cast<off_t>(done), source);
    if (!n.ok() || *n == 0) {
      digests->Give(buffer);
      if (!n.ok()) return n.status();
      return Status::Corruption(source, "shrank while being sent");
    }
    Status sent = tar->WriteFileData(std::string_view(buffer->data(), *n));
    if (hash) {
      digests->Hash(buffer, *n);
    } else {
      digests->Give(buffer);
    }
    CAPSULE_RETURN_IF_ERROR(sent);
    done += *n;
    if (progress != nullptr) progress->Add(*n, 0);
  }
  // What is sent must be what the digest says, even if the file changed under us.
  if (hash) digests->EndFile(source, file.sha256);
  if (progress != nullptr) progress->Add(0, 1);
  return tar->EndFile();
}

}  // namespace

Result<HaveMap> HaveOfCapsule(const std::string& dir) {
  HaveMap have;
  CAPSULE_ASSIGN_OR_RETURN(auto plan, PlanStream(dir, Phase::kSwitch));
  for (const auto& [path, item] : plan) {
    // Every name of a file, hard links too, so that a name gone at the sender is removed.
    if (item.kind == Planned::Kind::kFile || item.kind == Planned::Kind::kHardLink) have[path] = item.sha256;
  }
  return have;
}

Status PackCapsule(const std::string& dir, const PackOptions& options, ByteSink* sink, PackStats* stats) {
  CAPSULE_ASSIGN_OR_RETURN(Manifest capsule_manifest, Manifest::LoadHeader(dir));
  StreamManifest manifest;
  manifest.phase = options.phase;
  if (options.move_id) {
    manifest.move = *options.move_id;
  } else if (options.phase == Phase::kSwitch) {
    return Status::InvalidArgument("switch", "needs the move id of its copy (--move)");
  } else {
    CAPSULE_ASSIGN_OR_RETURN(manifest.move, NewMoveId());
  }
  manifest.version = kVersion;
  manifest.agent = capsule_manifest.agent;
  manifest.epoch = options.epoch ? *options.epoch : capsule_manifest.holder_epoch;
  // Schedules travel only while paused (capsule schedule pause), in full.
  if (options.phase == Phase::kSwitch) CAPSULE_RETURN_IF_ERROR(CheckSchedulesMayTravel(dir));
  CAPSULE_ASSIGN_OR_RETURN(auto plan, PlanStream(dir, options.phase));
  if (options.phase == Phase::kSwitch) {
    // Both in path order: one pass over each.
    auto planned = plan.begin();
    for (const auto& [path, sha] : options.have) {
      bool tracked = path.rfind("files/", 0) == 0 || path.rfind("memory/", 0) == 0;
      if (!tracked) continue;
      while (planned != plan.end() && planned->first < path) ++planned;
      if (planned == plan.end() || planned->first != path) manifest.removed.push_back(path);
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, manifest.ToCanonicalText());
  // Fail on a bad move id now, not at the receiver.
  CAPSULE_RETURN_IF_ERROR(StreamManifest::Parse(manifest_text).status().WithContext("move id"));

  PackStats local;
  local.move_id = manifest.move;
  local.removed = manifest.removed.size();
  auto skipped = [&options](const std::string& path, const Planned& item) {
    auto held = options.have.find(path);
    return held != options.have.end() && held->second == item.sha256 && item.link == 0 && !item.whole;
  };
  if (options.progress != nullptr) {
    uint64_t bytes = 0, files = 0;
    for (const auto& [path, item] : plan) {
      if (item.kind == Planned::Kind::kFile && !skipped(path, item)) bytes += item.size, ++files;
    }
    options.progress->Begin(PhaseName(options.phase), bytes, files);
  }
  TarWriter tar(sink);
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kStreamManifestName, manifest_text, 0644, {{kDigestRecord, Sha256Hex(manifest_text)}}));
  DigestCheck digests;
  for (const auto& [path, item] : plan) {
    switch (item.kind) {
      case Planned::Kind::kFolder:
        CAPSULE_RETURN_IF_ERROR(tar.AddDirectory(path, item.mode, OwnerRecords(item)));
        break;
      case Planned::Kind::kLink:
        CAPSULE_RETURN_IF_ERROR(tar.AddSymlink(path, item.link_target, OwnerRecords(item)));
        break;
      case Planned::Kind::kHardLink:
        CAPSULE_RETURN_IF_ERROR(tar.AddHardLink(path, item.link_target));
        break;
      case Planned::Kind::kSpecial: {
        TarEntry special = item.special;
        special.pax = OwnerRecords(item);
        CAPSULE_RETURN_IF_ERROR(tar.AddSpecial(special));
        break;
      }
      case Planned::Kind::kFile: {
        if (skipped(path, item)) {
          ++local.files_skipped;
          break;
        }
        CAPSULE_RETURN_IF_ERROR(WriteFileEntry(dir, item, options.hash_blobs, &tar, &digests, options.progress));
        ++local.files_sent;
        local.file_bytes_sent += item.size;
        break;
      }
    }
  }
  // The end goes only after every file sent was found to be what its digest says: a stream
  // without it is refused whole.
  if (std::optional<std::string> changed = digests.Finish()) {
    return Status::Corruption(*changed, "changed while being sent");
  }
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kStreamEndName, "", 0644, {{kDigestRecord, Sha256Hex("")}}));
  CAPSULE_RETURN_IF_ERROR(tar.Finish());
  if (stats != nullptr) *stats = local;
  return Status::Ok();
}

}  // namespace capsule::move
