#include "move/stream/plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cerrno>

#include <algorithm>
#include <string_view>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"
#include "capsule/format/schedule.h"
#include "capsule/format/workspace.h"

namespace capsule::move {

const Planned::Extra& Planned::extras() const {
  static const Extra kNone;
  return extra ? *extra : kNone;
}

Planned::Extra& Planned::mutable_extras() {
  if (!extra) extra = std::make_unique<Extra>();
  return *extra;
}

namespace {

// How many of the held bytes' last bytes a switch compares (JournalSeen::last_bytes).
constexpr uint64_t kSeenBytes = 4096;

// The journal's entry: whole, or, when it begins with what the receiver holds and is longer,
// only what follows (the receiver appends it). One read of the journal, or of what follows
// the held bytes alone when HeldJournal::recorded vouches for them (plan.h). The beginning is
// checked here only: a move plans its switch frozen, when nothing writes the journal, and
// what is sent is checked against the digest of what follows.
Status PlanJournal(const std::string& source, const std::optional<HeldJournal>& held, Planned* file) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(source, O_RDONLY | O_CLOEXEC));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return Status::IOError(source, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  std::optional<Sha256> whole;  // of the journal from its first byte
  Sha256 after;                 // of the bytes after the held ones
  auto hash = [&](uint64_t from, uint64_t to, bool also_after) -> Status {
    CAPSULE_ASSIGN_OR_RETURN(uint64_t got, ReadPieces(FileReadAt(fd.get(), source), from, to, [&](std::string_view bytes) {
                               whole->Update(bytes);
                               if (also_after) after.Update(bytes);
                             }));
    if (got < to - from) return Status::Corruption(source, "shrank while being read");
    return Status::Ok();
  };
  // The file and its last bytes before `end`, as a copy's plan sees them.
  auto seen_here = [&](uint64_t end) -> Result<JournalSeen> {
    JournalSeen seen{nullptr, static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), ""};
    uint64_t count = std::min(end, kSeenBytes);
    seen.last_bytes.resize(static_cast<size_t>(count));
    CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd.get(), seen.last_bytes.data(), seen.last_bytes.size(),
                                              static_cast<off_t>(end - count), source));
    seen.last_bytes.resize(n);
    return seen;
  };
  bool begins = false;  // with the held bytes
  if (held && held->size > 0 && held->size <= size) {
    bool vouched = false;
    if (held->seen && held->seen->state && held->recorded && held->recorded->size == size) {
      CAPSULE_ASSIGN_OR_RETURN(JournalSeen now, seen_here(held->size));
      vouched = now.device == held->seen->device && now.inode == held->seen->inode &&
                now.last_bytes == held->seen->last_bytes;
    }
    if (vouched) {
      whole.emplace(*held->seen->state);
      CAPSULE_RETURN_IF_ERROR(hash(held->size, size, true));
      begins = Sha256(*whole).FinishHex() == held->recorded->sha256;
      if (!begins) after.Reset();
    }
    if (!begins) {
      whole.emplace();
      CAPSULE_RETURN_IF_ERROR(hash(0, held->size, false));
      begins = Sha256(*whole).FinishHex() == held->sha256;
      CAPSULE_RETURN_IF_ERROR(hash(held->size, size, begins));
    }
  } else {
    whole.emplace();
    CAPSULE_RETURN_IF_ERROR(hash(0, size, false));
  }
  Planned::Extra& extra = file->mutable_extras();
  if (begins && size > held->size) {
    extra.append_from = held->size;
    extra.append_to_sha256 = held->sha256;
    file->size = size - held->size;
    file->sha256 = after.FinishHex();
    return Status::Ok();
  }
  CAPSULE_ASSIGN_OR_RETURN(JournalSeen seen, seen_here(size));
  seen.state = std::make_shared<const Sha256>(*whole);
  extra.journal_seen = std::make_shared<const JournalSeen>(std::move(seen));
  file->size = size;
  file->sha256 = whole->FinishHex();
  return Status::Ok();
}

Status VisitFile(const std::string& dir, const std::string& capsule_path, const std::string& stream_path, bool whole,
                 PlanVisitor* visitor, const std::optional<HeldJournal>& held_journal = std::nullopt) {
  Planned file;
  file.whole = whole;
  std::string source = JoinPath(dir, capsule_path);
  if (capsule_path.rfind(std::string(kScheduleDir) + "/", 0) == 0 ||
      capsule_path.rfind(std::string(kThreadsDir) + "/", 0) == 0) {
    // Jobs, day.json and thread files travel in canonical form; an empty one (created, never
    // written) counts as absent.
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(source, 16 << 20, "a schedule or thread document"));
    if (text.empty()) return Status::Ok();
    CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, capsule_path));
    Planned::Extra& extra = file.mutable_extras();
    CAPSULE_ASSIGN_OR_RETURN(extra.inline_data, CanonicalJson(json, capsule_path));
    extra.has_inline = true;
    file.size = extra.inline_data.size();
    file.sha256 = Sha256Hex(extra.inline_data);
  } else if (capsule_path == kJournalPath) {
    CAPSULE_RETURN_IF_ERROR(PlanJournal(source, held_journal, &file));
  } else {
    CAPSULE_ASSIGN_OR_RETURN(file.sha256, Sha256File(source, &file.size));
  }
  file.mutable_extras().source = std::move(source);
  visitor->AddFolders(stream_path);
  visitor->Add(stream_path, std::move(file));
  return Status::Ok();
}

// The files of one capsule folder, listed (attachments: only those at its top).
Status VisitFolder(const std::string& dir, const char* folder, bool top_only, bool whole,
                   bool (*wanted)(const std::string& path), PlanVisitor* visitor) {
  if (!PathExists(JoinPath(dir, folder))) return Status::Ok();
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(JoinPath(dir, folder)));
  for (const TreeEntry& entry : tree) {
    std::string path = std::string(folder) + "/" + entry.path;
    if (entry.type != TreeEntry::Type::kFile || IsTempDebris(path)) continue;
    if (top_only && entry.path.find('/') != std::string::npos) continue;
    if (wanted != nullptr && !wanted(path)) continue;
    CAPSULE_RETURN_IF_ERROR(VisitFile(dir, path, path, whole, visitor));
  }
  return Status::Ok();
}

// Builds the whole plan.
class PlanBuilder : public PlanVisitor {
 public:
  explicit PlanBuilder(StreamPlan* plan) : plan_(plan) {}

  void AddFolders(const std::string& stream_path) override {
    std::string dir = DirName(stream_path);
    while (dir != "." && !plan_->count(dir)) {
      Planned folder;
      folder.kind = Planned::Kind::kFolder;
      folder.mode = 0755;
      (*plan_)[dir] = std::move(folder);
      dir = DirName(dir);
    }
  }
  void Add(const std::string& stream_path, Planned item) override {
    plan_->insert_or_assign(plan_->end(), stream_path, std::move(item));  // mostly in path order
  }

 private:
  StreamPlan* plan_;
};

// Keeps only the digest of every name of a file: a receiver's have.
class HaveBuilder : public PlanVisitor {
 public:
  explicit HaveBuilder(HaveMap* have) : have_(have) {}

  void AddFolders(const std::string&) override {}
  void Add(const std::string& stream_path, Planned item) override {
    // Every name of a file, hard links too, so that a name gone at the sender is removed.
    if (item.kind == Planned::Kind::kFile || item.kind == Planned::Kind::kHardLink) {
      have_->insert_or_assign(have_->end(), stream_path, std::move(item.sha256));
    }
  }

 private:
  HaveMap* have_;
};

}  // namespace

Status VisitStream(const std::string& dir, Phase phase, PlanVisitor* visitor,
                   const std::optional<HeldJournal>& held_journal) {
  CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, Snapshot::Load(dir));
  Planned root;
  root.kind = Planned::Kind::kFolder;
  root.mode = 0755;
  visitor->Add("files", std::move(root));
  std::map<uint64_t, std::string> first_names;  // link group -> stream path of its first name
  std::string last_folder;
  std::string stream_path;
  for (const auto& [path, entry] : snapshot.entries()) {
    Planned item;
    stream_path = "files/" + path;
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
        item.mutable_extras().link_target = entry.target;
        CAPSULE_RETURN_IF_ERROR(CheckStreamLink(stream_path, entry.target, phase));
        break;
      case SnapshotEntry::Type::kFifo:
      case SnapshotEntry::Type::kCharDevice:
      case SnapshotEntry::Type::kBlockDevice: {
        item.kind = Planned::Kind::kSpecial;
        TarEntry& special = item.mutable_extras().special;
        special.path = stream_path;
        special.mode = entry.mode;
        special.type = entry.type == SnapshotEntry::Type::kFifo         ? TarEntry::Type::kFifo
                       : entry.type == SnapshotEntry::Type::kCharDevice ? TarEntry::Type::kCharDevice
                                                                        : TarEntry::Type::kBlockDevice;
        special.dev_major = major(entry.rdev);
        special.dev_minor = minor(entry.rdev);
        break;
      }
      case SnapshotEntry::Type::kSocket:
        continue;  // as with tar: a socket is a live process's, and no process travels
    }
    if (entry.link != 0 && entry.type == SnapshotEntry::Type::kFile) {
      // A hard link: its first name travels as what it is, every later one as a tar hard link
      // naming it (the spec's "earlier regular file of the same stream"). Hard-linked links,
      // FIFOs and devices travel as separate names.
      item.link = entry.link;
      auto [first, fresh] = first_names.emplace(entry.link, stream_path);
      if (!fresh) {
        item.kind = Planned::Kind::kHardLink;
        item.mutable_extras().link_target = first->second;
      }
    }
    // Entries in path order share their folder in runs: its folders are planned once a run.
    const std::string_view folder = std::string_view(stream_path).substr(0, stream_path.rfind('/'));
    if (folder != last_folder) {
      visitor->AddFolders(stream_path);
      last_folder = folder;
    }
    visitor->Add(stream_path, std::move(item));
  }
  if (phase == Phase::kFiles) return Status::Ok();
  for (const char* capsule_path : {kWorkingMemoryPath, kJournalPath, kVectorIndexPath, kEnvironmentSpecPath}) {
    CAPSULE_RETURN_IF_ERROR(VisitFile(dir, capsule_path, *StreamPathOfCapsuleFile(capsule_path), false, visitor,
                                      phase == Phase::kSwitch ? held_journal : std::nullopt));
  }
  // Attachments, each once by its digest (skipped when the receiver holds it).
  CAPSULE_RETURN_IF_ERROR(VisitFolder(dir, kAttachmentsDir, true, false, nullptr, visitor));
  // Instructions, skills and threads, always whole: the receiver replaces them with what the
  // stream holds, so every file is sent even when the receiver holds it the same.
  CAPSULE_RETURN_IF_ERROR(VisitFolder(dir, kHarnessDir, false, true,
                                      [](const std::string& path) { return IsHarnessPath(path); }, visitor));
  if (phase == Phase::kSwitch) CAPSULE_RETURN_IF_ERROR(VisitFolder(dir, kScheduleDir, false, false, nullptr, visitor));
  return Status::Ok();
}

Result<StreamPlan> PlanStream(const std::string& dir, Phase phase, const std::optional<HeldJournal>& held_journal) {
  StreamPlan plan;
  PlanBuilder builder(&plan);
  CAPSULE_RETURN_IF_ERROR(VisitStream(dir, phase, &builder, held_journal));
  return plan;
}

Result<HaveMap> HaveOfCapsule(const std::string& dir) {
  HaveMap have;
  HaveBuilder builder(&have);
  CAPSULE_RETURN_IF_ERROR(VisitStream(dir, Phase::kSwitch, &builder));
  return have;
}

}  // namespace capsule::move
