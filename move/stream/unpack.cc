#include "move/stream/unpack.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <future>
#include <map>
#include <set>
#include <string_view>
#include <utility>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/copy.h"
#include "capsule/format/create.h"
#include "capsule/format/documents.h"
#include "capsule/format/harness.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "journal/check.h"
#include "journal/merge_text.h"
#include "move/stream/reader.h"

namespace capsule::move {

namespace {


bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

Status CheckMoveId(const std::string& staging, const StreamManifest& manifest) {
  if (manifest.phase != Phase::kSwitch) return Status::Ok();
  Result<std::string> text = ReadFileBounded(JoinPath(staging, local::kMoveRecord), 1 << 20, "a move's record");
  std::string copy_move;
  if (text.ok()) {
    Result<Json> json = ParseJson(*text, local::kMoveRecord, Code::kCorruption);
    if (json.ok() && json->is_object()) copy_move = json->value("move", "");
  }
  if (copy_move.empty()) return Status::FailedPrecondition("switch of move " + manifest.move, "no copy of that move was received here");
  if (copy_move != manifest.move) {
    return Status::FailedPrecondition("switch of move " + manifest.move, "the copy received here was of move " + copy_move);
  }
  return Status::Ok();
}

// Whether the file at `path` begins with the whole of the file at `prefix_path`, compared a
// piece at a time (journals run to gigabytes).
Result<bool> FileStartsWith(const std::string& path, const std::string& prefix_path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd file, OpenFile(path, O_RDONLY | O_CLOEXEC));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd prefix, OpenFile(prefix_path, O_RDONLY | O_CLOEXEC));
  struct stat file_st, prefix_st;
  if (::fstat(file.get(), &file_st) != 0) return Status::IOError(path, errno);
  if (::fstat(prefix.get(), &prefix_st) != 0) return Status::IOError(prefix_path, errno);
  if (prefix_st.st_size > file_st.st_size) return false;
  constexpr size_t kPiece = 1 << 20;
  std::vector<char> a(kPiece), b(kPiece);
  for (off_t at = 0; at < prefix_st.st_size;) {
    size_t want = static_cast<size_t>(std::min<off_t>(kPiece, prefix_st.st_size - at));
    CAPSULE_ASSIGN_OR_RETURN(size_t got_a, ReadAt(file.get(), a.data(), want, at, path));
    CAPSULE_ASSIGN_OR_RETURN(size_t got_b, ReadAt(prefix.get(), b.data(), want, at, prefix_path));
    if (got_a != want || got_b != want) return Status::Corruption(got_a != want ? path : prefix_path, "changed while read");
    if (std::memcmp(a.data(), b.data(), want) != 0) return false;
    at += static_cast<off_t>(want);
  }
  return true;
}

// The journal of a switch that holds only what follows what the receiver holds: appended to
// it once what is held is found to be exactly what the stream appends to. `held_journal`,
// when given, is what the copy's check established of the journal held (its digest, so that
// the journal need not be read again); otherwise the journal held is hashed.
Status AppendJournal(const std::string& staging, const std::string& received_path, const ReceivedEntry::AppendTo& to,
                     const journal::CheckedJournal* held_journal) {
  std::string target = JoinPath(staging, kJournalPath);
  struct stat st;
  if (::stat(target.c_str(), &st) != 0) {
    return Status::Corruption(kStreamJournal, "the stream appends to a journal of " + std::to_string(to.size) +
                                                  " bytes and none is held here; the whole stream is refused");
  }
  std::string held_sha;
  if (held_journal != nullptr && held_journal->size == static_cast<uint64_t>(st.st_size)) {
    held_sha = held_journal->sha256;
  } else {
    CAPSULE_ASSIGN_OR_RETURN(held_sha, Sha256File(target));
  }
  if (static_cast<uint64_t>(st.st_size) != to.size || held_sha != to.sha256) {
    return Status::Corruption(kStreamJournal, "the stream appends to a journal of " + std::to_string(to.size) +
                                                  " bytes (SHA-256 " + to.sha256 + ") and the one held here is " +
                                                  std::to_string(st.st_size) + " bytes (SHA-256 " + held_sha +
                                                  "); the whole stream is refused");
  }
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd in, OpenFile(received_path, O_RDONLY | O_CLOEXEC));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd out, OpenFile(target, O_WRONLY | O_APPEND | O_CLOEXEC));
  std::vector<char> piece(1 << 20);
  for (off_t at = 0;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(in.get(), piece.data(), piece.size(), at, received_path));
    if (n == 0) break;
    CAPSULE_RETURN_IF_ERROR(WriteAll(out.get(), std::string_view(piece.data(), n), target));
    at += static_cast<off_t>(n);
  }
  return Status::Ok();  // made durable with the staging folder, as every received file
}

Status TakeJournal(const std::string& staging, const std::string& received_path) {
  std::string target = JoinPath(staging, kJournalPath);
  const bool held = PathExists(target);
  if (!held) CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(target)));
  CAPSULE_ASSIGN_OR_RETURN(bool extends, held ? FileStartsWith(received_path, target) : Result<bool>(true));
  if (extends) {
    // What is held is a prefix: the journal that arrived is it with the rest appended, and
    // takes its place as every received file does (made durable with the staging folder).
    if (::rename(received_path.c_str(), target.c_str()) != 0) return Status::IOError(target, errno);
    return Status::Ok();
  }
  CAPSULE_ASSIGN_OR_RETURN(bool behind, FileStartsWith(target, received_path));
  if (behind) return Status::Ok();  // the stream is behind what is held: nothing to add
  // The two diverged. Each machine's chain held here must still be a prefix of the stream's
  // (or the stream's of it): a chain that disagrees is refused, naming the conversation.
  // Chains that only grew apart are merged as a set union, as capsule merge does.
  CAPSULE_ASSIGN_OR_RETURN(std::string arriving, ReadFile(received_path));
  CAPSULE_ASSIGN_OR_RETURN(std::string held_text, ReadFile(target));
  CAPSULE_RETURN_IF_ERROR(journal::CheckSharedPrefix(held_text, arriving));
  CAPSULE_ASSIGN_OR_RETURN(std::string merged, journal::MergeJournalTexts(held_text, arriving));
  return WriteFileAtomic(target, merged);
}

// Applies the stream's workspace entries to `*snapshot`, the staged snapshot (not saved).
Status ApplyWorkspace(const std::string& staging, const ReceivedStream& stream, UnpackStats* stats,
                      Snapshot* staged) {
  Snapshot& snapshot = *staged;
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(staging, kBlobsDir)));
  for (const std::string& removed : stream.manifest.removed) {
    if (!StartsWith(removed, "files/")) continue;
    std::string rel = removed.substr(6);
    // The path and what lies beneath it: those start with "<path>/", together in path order.
    std::vector<std::string> doomed;
    if (snapshot.Find(rel) != nullptr) doomed.push_back(rel);
    const std::string beneath = rel + "/";
    for (auto it = snapshot.entries().lower_bound(beneath); it != snapshot.entries().end() && StartsWith(it->first, beneath);
         ++it) {
      doomed.push_back(it->first);
    }
    for (const std::string& path : doomed) snapshot.Remove(path);
    ++stats->removed;
  }
  // One pass over what is held before. A switch carries every folder, link, FIFO and device
  // the sender holds (only files are skipped for the have): one it does not carry is gone
  // there. Hard links: every name of a hard-linked file travels in each stream, so a name
  // kept from before and not in this stream is one of its own now; the groups are numbered
  // afresh.
  const bool is_switch = stream.manifest.phase == Phase::kSwitch;
  std::vector<std::string> gone;
  std::vector<std::string> alone;
  std::string stream_path = "files/";
  const size_t path_at = stream_path.size();
  for (const auto& [path, entry] : snapshot.entries()) {
    const bool maybe_gone = is_switch && entry.type != SnapshotEntry::Type::kFile;
    if (!maybe_gone && entry.link == 0) continue;
    stream_path.resize(path_at);
    stream_path += path;
    if (stream.entries.count(stream_path)) continue;
    (maybe_gone ? gone : alone).push_back(path);
  }
  for (const std::string& path : gone) snapshot.Remove(path);
  for (const std::string& path : alone) {
    SnapshotEntry entry = *snapshot.Find(path);
    entry.link = 0;
    snapshot.Set(path, entry);
  }
  std::map<std::string, uint64_t> groups;  // stream path of a group's first name -> its number
  for (const auto& [path, entry] : stream.entries) {
    if (entry.kind == ReceivedEntry::Kind::kHardLink) groups.emplace(entry.link_target, groups.size() + 1);
  }
  for (const auto& [path, entry] : stream.entries) {
    if (!StartsWith(path, "files/")) continue;
    std::string rel = path.substr(6);
    SnapshotEntry item;
    item.uid = entry.uid;
    item.gid = entry.gid;
    switch (entry.kind) {
      case ReceivedEntry::Kind::kFolder:
        item.type = SnapshotEntry::Type::kDirectory;
        item.mode = entry.mode;
        break;
      case ReceivedEntry::Kind::kLink:
        item.type = SnapshotEntry::Type::kSymlink;
        item.target = entry.link_target;
        break;
      case ReceivedEntry::Kind::kSpecial:
        item.type = entry.special == TarEntry::Type::kFifo         ? SnapshotEntry::Type::kFifo
                    : entry.special == TarEntry::Type::kCharDevice ? SnapshotEntry::Type::kCharDevice
                                                                   : SnapshotEntry::Type::kBlockDevice;
        item.mode = entry.mode;
        if (item.type != SnapshotEntry::Type::kFifo) item.rdev = makedev(entry.dev_major, entry.dev_minor);
        break;
      case ReceivedEntry::Kind::kHardLink:
        item.type = SnapshotEntry::Type::kFile;
        item.sha256 = entry.sha256;
        item.size = entry.size;
        item.mode = entry.mode;
        item.link = groups.at(entry.link_target);
        break;
      case ReceivedEntry::Kind::kFile: {
        if (auto group = groups.find(path); group != groups.end()) item.link = group->second;
        std::string received = JoinPath(JoinPath(staging, local::kReceivedDir), path);
        std::string blob = JoinPath(staging, BlobPath(entry.sha256));
        if (PathExists(blob)) {
          ::unlink(received.c_str());
        } else if (::rename(received.c_str(), blob.c_str()) != 0) {
          return Status::IOError(blob, errno);
        }
        item.sha256 = entry.sha256;
        item.size = entry.size;
        item.mode = entry.mode;
        ++stats->files_received;
        break;
      }
    }
    if (item.type != SnapshotEntry::Type::kDirectory) {
      // A file or link where a folder was: what was beneath it is gone.
      std::vector<std::string> beneath;
      for (auto it = snapshot.entries().lower_bound(rel + "/");
           it != snapshot.entries().end() && StartsWith(it->first, rel + "/"); ++it) {
        beneath.push_back(it->first);
      }
      for (const std::string& gone : beneath) snapshot.Remove(gone);
    }
    snapshot.Set(rel, item);
  }
  // Nothing may lie beneath a file or link of the workspace. Each entry's nearest ancestor
  // held must be a folder: one beneath a file or link either has that file or link as its
  // nearest ancestor or a folder that is itself beneath it. Entries in path order share
  // their parent in runs, so the parent's verdict is kept from one entry to the next.
  std::string_view checked_parent;
  std::string_view blocking;  // the file or link `checked_parent` lies beneath, if any
  for (const auto& [path, entry] : snapshot.entries()) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) continue;
    const std::string_view parent = std::string_view(path).substr(0, slash);
    if (parent != checked_parent) {
      checked_parent = parent;
      blocking = {};
      for (std::string_view ancestor = parent;;) {
        const SnapshotEntry* held = snapshot.Find(std::string(ancestor));
        if (held != nullptr) {
          if (held->type != SnapshotEntry::Type::kDirectory) blocking = ancestor;
          break;
        }
        const size_t up = ancestor.rfind('/');
        if (up == std::string_view::npos) break;
        ancestor = ancestor.substr(0, up);
      }
    }
    if (!blocking.empty()) {
      return Status::Corruption("stream entry 'files/" + path + "'", "lies beneath the link or file '" +
                                                                         std::string(blocking) +
                                                                         "' the capsule holds; the whole stream is refused");
    }
  }
  return Status::Ok();
}

Status ApplyOtherFiles(const std::string& staging, const ReceivedStream& stream, UnpackStats* stats,
                       const journal::CheckedJournal* held_journal) {
  for (const std::string& removed : stream.manifest.removed) {
    if (!StartsWith(removed, "memory/")) continue;
    std::optional<std::string> capsule_path = CapsulePathOfStreamFile(removed);
    if (capsule_path == std::string(kJournalPath)) {
      return Status::Corruption(kStreamManifestName, "removed names the journal, which is never removed");
    }
    if (capsule_path) (void)RemoveTree(JoinPath(staging, *capsule_path));
    ++stats->removed;
  }
  if (stream.manifest.phase == Phase::kSwitch) {
    // Schedules are sent in full on each switch: what is held is replaced.
    CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging, kScheduleDir)));
  }
  if (stream.manifest.phase != Phase::kFiles) {
    // Instructions, skills and threads are sent whole in every copy and switch: what is held
    // is replaced by what the stream holds (a skill gone at the sender is gone here).
    struct stat st;
    if (::lstat(JoinPath(staging, kHarnessDir).c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) {
      return Status::Corruption(std::string(kHarnessDir), "is not a folder in the capsule held here");
    }
    CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging, kInstructionsPath)));
    CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging, kSkillsDir)));
    CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging, kThreadsDir)));
  }
  for (const auto& [path, entry] : stream.entries) {
    if (StartsWith(path, "files/") || path == "files" || entry.kind == ReceivedEntry::Kind::kFolder) continue;
    std::optional<std::string> capsule_path = CapsulePathOfStreamFile(path);
    if (!capsule_path || entry.kind != ReceivedEntry::Kind::kFile) {
      ++stats->ignored;
      continue;
    }
    std::string received = JoinPath(JoinPath(staging, local::kReceivedDir), path);
    ++stats->files_received;
    if (*capsule_path == kJournalPath) {
      CAPSULE_RETURN_IF_ERROR(entry.append_to ? AppendJournal(staging, received, *entry.append_to, held_journal)
                                              : TakeJournal(staging, received));
      continue;
    }
    std::string target = JoinPath(staging, *capsule_path);
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(target)));
    if (::rename(received.c_str(), target.c_str()) != 0) return Status::IOError(target, errno);
  }
  return Status::Ok();
}

// What every receiver checks of a stream before applying it: sealed when it must be, the same
// agent as what is held, and a copy to build on for a switch.
Status CheckArrival(const std::string& dir, const std::optional<Manifest>& held, const StreamManifest& manifest,
                    const UnpackOptions& options) {
  if (manifest.phase == Phase::kSwitch && !options.sealed) {
    return Status::Corruption("switch of move " + manifest.move, "did not arrive sealed; a switch always is");
  }
  if (held && held->agent.id != manifest.agent.id) {
    return Status::FailedPrecondition(dir, "holds agent " + held->agent.id + ", the stream is for agent " + manifest.agent.id);
  }
  if (!held && manifest.phase != Phase::kCopy) {
    return Status::FailedPrecondition(dir, std::string("a ") + PhaseName(manifest.phase) + " stream needs the capsule its copy made");
  }
  return Status::Ok();
}

// Applies a received stream onto the capsule folder `staging` (a private copy): the move id,
// the workspace, the other files, and the record of which move's stream was applied.
// `*snapshot`: the staged snapshot, with the stream's workspace applied; the caller saves it.
// `held_journal`: what a copy's check established of the journal held, when known.
Status ApplyReceived(const std::string& staging, const ReceivedStream& stream, UnpackStats* stats,
                     Snapshot* snapshot, const journal::CheckedJournal* held_journal = nullptr) {
  CAPSULE_RETURN_IF_ERROR(CheckMoveId(staging, stream.manifest));
  CAPSULE_RETURN_IF_ERROR(ApplyWorkspace(staging, stream, stats, snapshot));
  CAPSULE_RETURN_IF_ERROR(ApplyOtherFiles(staging, stream, stats, held_journal));
  CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging, local::kReceivedDir)));
  Json record = {{"move", stream.manifest.move}, {"phase", PhaseName(stream.manifest.phase)}};
  return WriteFileAtomic(JoinPath(staging, local::kMoveRecord), record.dump() + "\n");
}

// The manifest of `dir`, or an empty one where there is none yet.
Result<Manifest> ManifestIfAny(const std::string& dir) {
  if (!PathExists(JoinPath(dir, kManifestPath))) return Manifest();
  return Manifest::Load(dir);
}

// The snapshot of `dir`, or an empty one where there is none yet.
Result<Snapshot> SnapshotIfAny(const std::string& dir) {
  if (!PathExists(JoinPath(dir, kSnapshotPath))) return Snapshot();
  return Snapshot::Load(dir);
}

// Whether `staging`'s manifest and snapshot are still the files `saved` describes.
bool StillSaved(const std::string& staging, const StagedDocuments& saved) {
  Result<FileStamp> manifest = StampOf(JoinPath(staging, kManifestPath));
  Result<FileStamp> snapshot = StampOf(JoinPath(staging, kSnapshotPath));
  return manifest.ok() && snapshot.ok() && *manifest == saved.manifest_file && *snapshot == saved.snapshot_file;
}

// The manifest of `staging` brought up to date by hashing only what may have changed: every
// file outside the blob store (a few small documents) but `unchanged` (the journal as its copy
// left it, see JournalAsCopied). The blobs the stream brought are listed with the digests
// checked as they were written; those already listed were checked when they arrived and are
// never rewritten (a blob's name is its digest). `manifest`: the staging area's manifest as it
// was before the stream was applied (a stream never carries manifest.json).
Result<Manifest> RefreshStagedManifest(const std::string& staging, const ReceivedStream& stream,
                                       const ApplyOptions& options, Manifest manifest,
                                       const std::set<std::string>& unchanged = {}) {
  manifest.agent = stream.manifest.agent;
  manifest.holder_machine = options.holder_machine;
  manifest.holder_epoch = options.holder_epoch;
  std::set<std::string> paths;
  for (const auto& [path, digest] : manifest.files) {
    if (!IsBlobPath(path)) paths.insert(path);
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(staging, {kLocalDir, kBlobsDir}));
  for (const TreeEntry& entry : tree) {
    if (entry.type == TreeEntry::Type::kFile && entry.path != kManifestPath && !IsTempDebris(entry.path)) {
      paths.insert(entry.path);
    }
  }
  for (const std::string& path : unchanged) paths.erase(path);
  CAPSULE_RETURN_IF_ERROR(RefreshManifestEntries(staging, std::vector<std::string>(paths.begin(), paths.end()), &manifest));
  // A new blob was hashed as it was written (ReadStream refuses a file whose bytes differ
  // from its digest) and is named by that digest: its entry needs no second reading.
  for (const auto& [path, entry] : stream.entries) {
    if (entry.kind == ReceivedEntry::Kind::kFile && StartsWith(path, "files/")) {
      manifest.files[BlobPath(entry.sha256)] = FileDigest{entry.sha256, entry.size};
    }
  }
  return manifest;
}

// The blobs of the staged snapshot's removed files leave the staging area and `manifest`: a
// file the other end deleted is not kept here either. `listed_before`: a copy already went
// through here, listing the blobs folder, and every blob placed since is in `manifest` (a
// switch): the manifest alone says which blobs there are.
Status DropDeletedContent(const std::string& staging, const Snapshot& snapshot, Manifest* manifest,
                          bool listed_before) {
  std::vector<std::string> unreferenced;
  if (listed_before) {
    unreferenced = UnreferencedBlobsOf(*manifest, snapshot);
  } else {
    CAPSULE_ASSIGN_OR_RETURN(unreferenced, UnreferencedBlobs(staging, snapshot));
  }
  for (const std::string& blob : unreferenced) manifest->files.erase(blob);
  return RemoveBlobs(staging, unreferenced);
}

// Whether a switch leaves the staged journal exactly as its copy checked it: the switch
// brought no journal, and what the copy checked (ApplyOptions::checked_journal) covers the
// journal the staged manifest lists. Only this process writes the staging area, so that
// journal is neither hashed nor checked again: a switch's cost does not grow with a long
// conversation that did not change.
bool JournalAsCopied(const std::optional<Manifest>& held, const ReceivedStream& stream, const ApplyOptions& options) {
  if (options.expected_phase != Phase::kSwitch || options.checked_journal == nullptr || !held) return false;
  if (stream.entries.count(*StreamPathOfCapsuleFile(kJournalPath))) return false;
  auto listed = held->files.find(kJournalPath);
  return listed != held->files.end() && listed->second.size == options.checked_journal->size &&
         listed->second.sha256 == options.checked_journal->sha256;
}

// The journal's check from the copy, when a switch appended events to the journal it covers
// (LNK.append.*, which AppendJournal found held): the journal's digest and check then continue
// from it, reading only the appended bytes, so that the switch's cost does not grow with the
// conversation's history. Null otherwise.
const journal::CheckedJournal* JournalGrownFrom(const ReceivedStream& stream, const ApplyOptions& options) {
  const journal::CheckedJournal* from = options.checked_journal;
  if (options.expected_phase != Phase::kSwitch || from == nullptr || from->hasher == nullptr) return nullptr;
  auto entry = stream.entries.find(kStreamJournal);
  if (entry == stream.entries.end() || !entry->second.append_to) return nullptr;
  const ReceivedEntry::AppendTo& to = *entry->second.append_to;
  return to.size == from->size && to.sha256 == from->sha256 ? from : nullptr;
}

// The checks of capsule verify that do not need every byte read again: the layout's files are
// listed, each blob under its digest, the snapshot (`snapshot`, as saved there) names only
// listed blobs of the right size and every blob but the empty one, the environment spec holds
// no secret value, the journal's chains hold (unless `journal_as_copied`: JournalAsCopied).
Status CheckStaged(const std::string& staging, const Manifest& manifest, const Snapshot& snapshot,
                   const ApplyOptions& options, bool journal_as_copied = false,
                   const journal::CheckedJournal* grown_from = nullptr) {
  // The manifest's files are what is there (the staging area's own bookkeeping): the blobs
  // need only their names checked, in one pass, and the rest goes through the shared checks.
  const std::string blobs_prefix = std::string(kBlobsDir) + "/";
  Manifest others;
  std::map<std::string, ObservedFile> observed;
  std::vector<FoundBlob> blobs;
  std::vector<std::string> problems;
  for (const auto& [path, digest] : manifest.files) {
    if (!StartsWith(path, blobs_prefix)) {
      others.files.emplace_hint(others.files.end(), path, digest);
      observed.emplace_hint(observed.end(), path, ObservedFile{digest.sha256, digest.size, digest.sha256});
    } else if (!IsBlobPath(path)) {
      problems.push_back(path + ": not a blob name (64 hex digits of its SHA-256)");
    } else {
      std::string_view name = std::string_view(path).substr(blobs_prefix.size());
      if (name != digest.sha256) problems.push_back(path + ": blob digest does not match its name");
      blobs.push_back(FoundBlob{name, digest.size});
    }
  }
  std::vector<std::string> snapshot_problems;
  if (manifest.files.count(kSnapshotPath)) CheckSnapshotBlobs(snapshot, blobs, &snapshot_problems);
  std::map<std::string, std::string> documents;
  if (PathExists(JoinPath(staging, kEnvironmentSpecPath))) {
    CAPSULE_ASSIGN_OR_RETURN(documents[kEnvironmentSpecPath], ReadFile(JoinPath(staging, kEnvironmentSpecPath)));
  }
  // Schedules, threads and skills are checked as capsule verify checks them.
  for (const auto& [path, digest] : manifest.files) {
    if (IsCheckedDocument(path) && PathExists(JoinPath(staging, path))) {
      CAPSULE_ASSIGN_OR_RETURN(documents[path], ReadFile(JoinPath(staging, path)));
    }
  }
  std::string journal_path = JoinPath(staging, kJournalPath);
  UniqueFd journal_fd;
  ReadAtFunction journal;
  uint64_t journal_size = 0;
  if (PathExists(journal_path)) {
    CAPSULE_ASSIGN_OR_RETURN(journal_fd, OpenFile(journal_path, O_RDONLY | O_CLOEXEC));
    journal = FileReadAt(journal_fd.get(), journal_path);
    struct stat st;
    if (::fstat(journal_fd.get(), &st) != 0) return Status::IOError(journal_path, errno);
    journal_size = static_cast<uint64_t>(st.st_size);
  }
  // The check reads a block at a time into one buffer, made no larger than what it reads (a
  // switch's few appended events should not cost a buffer of megabytes, zeroed).
  const uint64_t to_read = journal_size - std::min<uint64_t>(journal_size, grown_from ? grown_from->size : 0);
  const size_t block = static_cast<size_t>(std::clamp<uint64_t>(to_read + 1, 4096, 8 << 20));
  VerifyOptions verify;
  verify.check_journal = [&options, journal_as_copied, grown_from, block](const ReadAtFunction& read) -> std::vector<std::string> {
    if (journal_as_copied) return {};
    journal::CheckedJournal none;
    const journal::CheckedJournal& from = options.checked_journal ? *options.checked_journal : none;
    Result<journal::CheckedJournal> checked = grown_from ? journal::CheckJournalAppendedAt(*grown_from, read, options.visit_journal, block)
                                                         : journal::CheckJournalGrowthAt(from, read, options.visit_journal, block);
    if (!checked.ok() && checked.status().code() == Code::kIOError) {
      return {std::string(kJournalPath) + ": unreadable: " + checked.status().message()};
    }
    if (!checked.ok()) return {checked.status().message()};
    if (options.checked_journal) *options.checked_journal = std::move(*checked);
    return {};
  };
  CheckAgainstManifest(others, observed, documents, journal, verify, &problems, &snapshot_problems);
  if (!problems.empty()) {
    return Status::Corruption("received capsule", "does not verify (" + problems.front() + ")");
  }
  return Status::Ok();
}

Status Swap(const std::string& staging, const std::string& dir, bool dir_exists) {
  if (!dir_exists) return PlaceStagingDir(staging, dir);
  if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
    return Status::IOError(dir, errno);
  }
  CAPSULE_RETURN_IF_ERROR(SyncDirectory(DirName(dir)));
  return RemoveTree(staging);  // now the old capsule
}

}  // namespace

Status UnpackStream(ByteSource* source, const std::string& dir, const UnpackOptions& options,
                    UnpackStats* stats) {
  bool dir_exists = PathExists(JoinPath(dir, kManifestPath));
  std::optional<Manifest> held;
  if (dir_exists) {
    CAPSULE_ASSIGN_OR_RETURN(held, Manifest::Load(dir));
    // Fail safe: a stream never lands on a capsule this machine runs.
    Result<HolderRecord> record = HolderRecord::Load(dir);
    if (record.ok() && record->state != HolderState::kRetired) {
      return Status::FailedPrecondition(dir, std::string("this machine holds the agent (") +
                                                 HolderStateName(record->state) + " at epoch " +
                                                 std::to_string(record->epoch) + "); a stream is received only where it is not held");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir(dir));
  UnpackStats local;
  Status status = [&]() -> Status {
    StagingSync sync(staging);
    std::string received_dir = JoinPath(staging, local::kReceivedDir);
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(received_dir));
    CAPSULE_ASSIGN_OR_RETURN(ReceivedStream stream, ReadStream(source, received_dir));
    local.manifest = stream.manifest;
    local.file_bytes = stream.file_bytes;
    const StreamManifest& manifest = stream.manifest;
    CAPSULE_RETURN_IF_ERROR(CheckArrival(dir, held, manifest, options));
    if (held) CAPSULE_RETURN_IF_ERROR(CopyCapsule(dir, staging, {local::kMachine, local::kHolder, local::kMoveRecord}));
    CAPSULE_ASSIGN_OR_RETURN(Snapshot snapshot, SnapshotIfAny(staging));
    CAPSULE_RETURN_IF_ERROR(ApplyReceived(staging, stream, &local, &snapshot));
    CAPSULE_RETURN_IF_ERROR(snapshot.Save(staging));
    CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(staging));
    if (!PathExists(JoinPath(staging, local::kHolder))) {
      // A received copy is not held here until a move activates it.
      HolderRecord record_here{manifest.agent.id, machine, manifest.epoch, HolderState::kRetired, "", false};
      CAPSULE_RETURN_IF_ERROR(record_here.Save(staging));
    }
    // As a move's receiver does: every received byte was checked against its digest as it
    // arrived, and the blobs held here were when they arrived, so the manifest is brought up
    // to date by hashing only the few files outside the blob store; the rest of capsule
    // verify (layout, snapshot, documents, the whole journal) is checked before anything is
    // placed.
    ApplyOptions apply;
    apply.holder_machine = held ? held->holder_machine : machine;
    apply.holder_epoch = held ? held->holder_epoch : manifest.epoch;
    CAPSULE_ASSIGN_OR_RETURN(Manifest staged, ManifestIfAny(staging));
    CAPSULE_ASSIGN_OR_RETURN(Manifest new_manifest, RefreshStagedManifest(staging, stream, apply, std::move(staged)));
    CAPSULE_RETURN_IF_ERROR(DropDeletedContent(staging, snapshot, &new_manifest, /*listed_before=*/false));
    Status checked = CheckStaged(staging, new_manifest, snapshot, apply);
    if (!checked.ok()) return checked.WithContext("nothing was placed");
    CAPSULE_RETURN_IF_ERROR(new_manifest.Save(staging));
    CAPSULE_RETURN_IF_ERROR(sync.Finish());
    return Swap(staging, dir, dir_exists);
  }();
  if (!status.ok()) {
    (void)RemoveTree(staging);
    return status;
  }
  if (stats != nullptr) *stats = local;
  return Status::Ok();
}

}  // namespace capsule::move

namespace capsule::move {

Status ApplyStreamToStaging(ByteSource* source, const std::string& staging, const ApplyOptions& options,
                            UnpackStats* stats) {
  std::optional<StagedDocuments> before;
  if (options.staged != nullptr) before = std::exchange(*options.staged, std::nullopt);
  std::optional<Manifest> held;
  Snapshot snapshot;
  if (before && StillSaved(staging, *before)) {
    held = std::move(before->manifest);
    snapshot = std::move(before->snapshot);
  } else {
    if (PathExists(JoinPath(staging, kManifestPath))) {
      CAPSULE_ASSIGN_OR_RETURN(held, Manifest::Load(staging));
    }
    CAPSULE_ASSIGN_OR_RETURN(snapshot, SnapshotIfAny(staging));
  }
  UnpackStats local;
  // The staging area is itself the temporary: one syncfs at the end instead of an fsync a file.
  StagingSync sync(staging);
  std::string received_dir = JoinPath(staging, local::kReceivedDir);
  CAPSULE_RETURN_IF_ERROR(RemoveTree(received_dir));
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(received_dir));
  CAPSULE_ASSIGN_OR_RETURN(ReceivedStream stream, ReadStream(source, received_dir));
  local.manifest = stream.manifest;
  local.file_bytes = stream.file_bytes;
  if (stream.manifest.phase != options.expected_phase) {
    return Status::FailedPrecondition("stream of move " + stream.manifest.move,
                                      std::string("is a ") + PhaseName(stream.manifest.phase) + ", a " +
                                          PhaseName(options.expected_phase) + " was expected");
  }
  if (stream.manifest.move != options.expected_move) {
    return Status::FailedPrecondition("stream of move " + stream.manifest.move, "the move offered here is " + options.expected_move);
  }
  if (stream.manifest.agent.id != options.expected_agent) {
    return Status::FailedPrecondition("stream of move " + stream.manifest.move,
                                      "is for agent " + stream.manifest.agent.id + ", the move offered agent " + options.expected_agent);
  }
  UnpackOptions unpack;
  unpack.sealed = options.sealed;
  CAPSULE_RETURN_IF_ERROR(CheckArrival(staging, held, stream.manifest, unpack));
  CAPSULE_RETURN_IF_ERROR(ApplyReceived(staging, stream, &local, &snapshot, options.checked_journal));
  // The snapshot's text is built while the manifest is brought up to date, which names it by
  // the digest of that text (as a mount's checkpoint does) instead of reading it back.
  std::future<Result<std::string>> snapshot_text =
      std::async(std::launch::async, [&snapshot] { return snapshot.ToCanonicalText(); });
  const bool journal_as_copied = JournalAsCopied(held, stream, options);
  const journal::CheckedJournal* grown_from = JournalGrownFrom(stream, options);
  std::set<std::string> unchanged = {kSnapshotPath};
  if (journal_as_copied || grown_from) unchanged.insert(kJournalPath);
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, RefreshStagedManifest(staging, stream, options,
                                                                    held ? std::move(*held) : Manifest(), unchanged));
  if (grown_from) {
    // Its digest continues the copy's over the bytes appended (checked with them below).
    const std::string path = JoinPath(staging, kJournalPath);
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
    Sha256 hasher(*grown_from->hasher);
    CAPSULE_ASSIGN_OR_RETURN(uint64_t appended, ReadPieces(FileReadAt(fd.get(), path), grown_from->size, UINT64_MAX,
                                                           [&hasher](std::string_view piece) { hasher.Update(piece); }));
    manifest.files[kJournalPath] = FileDigest{hasher.FinishHex(), grown_from->size + appended};
  }
  CAPSULE_RETURN_IF_ERROR(
      DropDeletedContent(staging, snapshot, &manifest, /*listed_before=*/options.expected_phase == Phase::kSwitch));
  CAPSULE_ASSIGN_OR_RETURN(const std::string snapshot_bytes, snapshot_text.get());
  manifest.files[kSnapshotPath] = FileDigest::OfText(snapshot_bytes);
  // Both documents are written while the staged capsule is checked: nothing here is placed
  // before the check passes and the one sync below, and a refused stream's staging area goes.
  std::future<Status> documents_saved = std::async(std::launch::async, [&]() -> Status {
    StagingSync same(staging);  // synced by `sync` below, as on this thread
    CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(staging, kSnapshotPath), snapshot_bytes));
    return manifest.Save(staging);
  });
  Status checked = CheckStaged(staging, manifest, snapshot, options, journal_as_copied, grown_from);
  Status written = documents_saved.get();
  CAPSULE_RETURN_IF_ERROR(checked);
  CAPSULE_RETURN_IF_ERROR(written);
  CAPSULE_RETURN_IF_ERROR(sync.Finish());
  if (options.staged != nullptr) {
    StagedDocuments saved{std::move(manifest), {}, std::move(snapshot), {}};
    CAPSULE_ASSIGN_OR_RETURN(saved.manifest_file, StampOf(JoinPath(staging, kManifestPath)));
    CAPSULE_ASSIGN_OR_RETURN(saved.snapshot_file, StampOf(JoinPath(staging, kSnapshotPath)));
    *options.staged = std::move(saved);
  }
  if (stats != nullptr) *stats = local;
  return Status::Ok();
}

}  // namespace capsule::move
