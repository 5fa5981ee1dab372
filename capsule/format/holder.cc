#include "capsule/format/holder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <random>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"

namespace capsule {

namespace {

// The identity of the folder `dir` itself: its inode number and, where the file system keeps
// one, its birth time. A rename keeps both; cp -a, rsync or a restore from backup makes a new
// folder with new ones.
Result<std::string> FolderIdentity(const std::string& dir) {
  struct statx st;
  if (::statx(AT_FDCWD, dir.c_str(), 0, STATX_INO | STATX_BTIME, &st) != 0) return Status::IOError(dir, errno);
  std::string id = "inode " + std::to_string(st.stx_ino);
  if ((st.stx_mask & STATX_BTIME) != 0) {
    id += " born " + std::to_string(st.stx_btime.tv_sec) + "." + std::to_string(st.stx_btime.tv_nsec);
  }
  return id;
}

struct LoadedRecord {
  HolderRecord record;
  std::string folder;  // the identity of the folder it was written in ("" in older records)
};

Result<LoadedRecord> LoadRecord(const std::string& capsule_dir) {
  std::string path = JoinPath(capsule_dir, local::kHolder);
  Result<std::string> text = ReadFileBeneath(capsule_dir, local::kHolder);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) {
      return Status::NotFound(path, "no holder record: this machine does not hold the agent");
    }
    return text.status();
  }
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(*text, path, Code::kCorruption));
  if (!json.is_object() || !json.value("agent", Json()).is_string() ||
      !json.value("machine", Json()).is_string() || !json.value("epoch", Json()).is_number_unsigned() ||
      !json.value("state", Json()).is_string() || !json.value("move", Json("")).is_string() ||
      !json.value("admin_freeze", Json(false)).is_boolean() || !json.value("folder", Json("")).is_string()) {
    return Status::Corruption(path, "needs agent, machine, epoch and state (and move and folder, when there, strings)");
  }
  LoadedRecord loaded;
  HolderRecord& record = loaded.record;
  record.agent = json["agent"];
  record.machine = json["machine"];
  record.epoch = json["epoch"];
  record.move = json.value("move", "");
  record.admin_freeze = json.value("admin_freeze", false);
  loaded.folder = json.value("folder", "");
  std::string state = json["state"];
  if (state == "active") {
    record.state = HolderState::kActive;
  } else if (state == "frozen") {
    record.state = HolderState::kFrozen;
  } else if (state == "retired") {
    record.state = HolderState::kRetired;
  } else {
    return Status::Corruption(path, "unknown state '" + state + "'");
  }
  return loaded;
}

}  // namespace

const char* HolderStateName(HolderState state) {
  switch (state) {
    case HolderState::kActive: return "active";
    case HolderState::kFrozen: return "frozen";
    case HolderState::kRetired: return "retired";
  }
  return "retired";
}

Result<HolderRecord> HolderRecord::Load(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(LoadedRecord loaded, LoadRecord(capsule_dir));
  if (!loaded.folder.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string here, FolderIdentity(capsule_dir));
    if (here != loaded.folder) {
      // Two folders with one machine id would both take appends, and their journals could
      // never merge again. Fail safe: the copy runs nothing until someone says what it is.
      return Status::FailedPrecondition(
          capsule_dir, "is a copy of a capsule held elsewhere (cp -a, rsync or a restore: its holder record was "
                       "written in another folder), so it is not held here; run 'capsule adopt " +
                           capsule_dir + "' to make this folder a holder of its own (a machine id of its own, so "
                                         "its journal merges with the original's), or use the original");
    }
  }
  return loaded.record;
}

Status HolderRecord::Save(const std::string& capsule_dir) const {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(capsule_dir));
  CAPSULE_RETURN_IF_ERROR(root.MakeDir(kLocalDir, 0700));
  Json json = {{"agent", agent}, {"machine", machine}, {"epoch", epoch}, {"state", HolderStateName(state)}};
  if (!move.empty()) json["move"] = move;
  if (admin_freeze) json["admin_freeze"] = true;
  CAPSULE_ASSIGN_OR_RETURN(std::string folder, FolderIdentity(capsule_dir));
  json["folder"] = folder;
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(json, local::kHolder));
  return root.WriteFileAtomic(local::kHolder, text + "\n", 0644);
}

namespace {

// What a record says, for messages: "frozen at epoch 3 for move 0a1b...".
std::string Describe(const HolderRecord& record) {
  std::string text = std::string(HolderStateName(record.state)) + " at epoch " + std::to_string(record.epoch);
  if (!record.move.empty()) text += " for move " + record.move;
  return text;
}

}  // namespace

Result<HolderRecord> TransitionHolder(const std::string& capsule_dir, const HolderTransition& transition,
                                      std::optional<uint64_t> at_epoch) {
  const std::string lock_path = JoinPath(capsule_dir, local::kHolderLock);
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(capsule_dir, kLocalDir)));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock, OpenBeneath(capsule_dir, local::kHolderLock, O_RDWR | O_CREAT | O_NOFOLLOW, 0644));
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Status::IOError(lock_path + ": flock", errno);
  }
  Result<HolderRecord> loaded = HolderRecord::Load(capsule_dir);
  if (!loaded.ok()) {
    return Status::FailedPrecondition(capsule_dir, std::string("cannot become ") + HolderStateName(transition.to) +
                                                       ": " + loaded.status().message());
  }
  HolderRecord record = *loaded;
  auto refuse = [&](const std::string& why) {
    return Status::FailedPrecondition(capsule_dir, std::string("cannot become ") + HolderStateName(transition.to) +
                                                       ": the holder record says " + Describe(record) + why);
  };
  bool frozen_for_move = record.state == HolderState::kFrozen && !record.move.empty();
  if (at_epoch && record.epoch != *at_epoch) {
    return refuse("; this change was meant for epoch " + std::to_string(*at_epoch));
  }
  auto expects = [&](HolderState state) {
    for (HolderState from : transition.from) {
      if (from == state) return true;
    }
    return false;
  };
  if (transition.to == HolderState::kFrozen && record.state == HolderState::kFrozen) {
    if (record.move == transition.move) return record;  // already so
    // A move takes over an admin's freeze (one that names no move); never another move's.
    if (!record.move.empty() || !expects(HolderState::kFrozen)) return refuse("");
    record.move = transition.move;
    record.admin_freeze = true;
    CAPSULE_RETURN_IF_ERROR(record.Save(capsule_dir));
    return record;
  }
  if (transition.to == HolderState::kActive && frozen_for_move && record.move == transition.move &&
      record.admin_freeze) {
    // The move's rollback gives the admin's freeze back.
    record.move = "";
    record.admin_freeze = false;
    CAPSULE_RETURN_IF_ERROR(record.Save(capsule_dir));
    return record;
  }
  if (transition.to == HolderState::kActive && frozen_for_move && record.move != transition.move) {
    return refuse("; only that move thaws it: capsule move --recover resolves it");
  }
  if (transition.to == HolderState::kActive && !transition.move.empty() && record.state == HolderState::kFrozen &&
      record.move.empty()) {
    return record;  // an admin's freeze, not the move's: a move's thaw leaves it as it is
  }
  if (record.state == transition.to) return record;  // already so: a retried transition
  if (!expects(record.state)) return refuse("");
  record.state = transition.to;
  record.move = transition.to == HolderState::kFrozen ? transition.move : "";
  record.admin_freeze = false;
  CAPSULE_RETURN_IF_ERROR(record.Save(capsule_dir));
  return record;
}

Result<std::string> LoadOrCreateMachineId(const std::string& capsule_dir) {
  std::string path = JoinPath(capsule_dir, local::kMachine);
  Result<std::string> existing = ReadFileBeneath(capsule_dir, local::kMachine);
  if (existing.ok()) {
    std::string id = *existing;
    while (!id.empty() && id.back() == '\n') id.pop_back();
    if (id.size() != 18 || id.rfind("m-", 0) != 0) return Status::Corruption(path, "not a machine id");
    return id;
  }
  if (existing.status().code() != Code::kNotFound) return existing.status();
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(JoinPath(capsule_dir, kLocalDir)));
  CAPSULE_ASSIGN_OR_RETURN(std::string hex, RandomHex(8));
  std::string id = "m-" + hex;
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path, 0644));
  CAPSULE_RETURN_IF_ERROR(file.Append(id + "\n"));
  Status placed = file.CommitNoReplace();
  if (placed.code() == Code::kAlreadyExists) return LoadOrCreateMachineId(capsule_dir);  // lost a race
  CAPSULE_RETURN_IF_ERROR(placed);
  return id;
}

Status CheckHeldHere(const std::string& capsule_dir) {
  Status writable = CheckHeldForWrite(capsule_dir);
  if (writable.ok()) return writable;
  Result<HolderRecord> record = HolderRecord::Load(capsule_dir);
  return record.ok() && record->state == HolderState::kFrozen ? Status::Ok() : writable;
}

Status CheckHeldForWrite(const std::string& capsule_dir) {
  Result<HolderRecord> record = HolderRecord::Load(capsule_dir);
  if (!record.ok()) {
    if (record.status().code() == Code::kFailedPrecondition) return record.status();  // a copy
    if (record.status().code() == Code::kNotFound) {
      return Status::FailedPrecondition(capsule_dir, "not held by this machine (no holder record); it is read-only here");
    }
    return Status::FailedPrecondition(capsule_dir, "holder record unreadable, so not held here: " + record.status().message());
  }
  switch (record->state) {
    case HolderState::kActive: return Status::Ok();
    case HolderState::kFrozen:
      return Status::FailedPrecondition(capsule_dir, "frozen at epoch " + std::to_string(record->epoch) + "; thaw it first");
    case HolderState::kRetired:
      return Status::FailedPrecondition(capsule_dir, "retired here at epoch " + std::to_string(record->epoch) + "; read-only");
  }
  return Status::FailedPrecondition(capsule_dir, "not held");
}

Result<UniqueFd> HoldForWrite(const std::string& capsule_dir) {
  const std::string lock_path = JoinPath(capsule_dir, local::kHolderLock);
  Result<UniqueFd> lock = OpenBeneath(capsule_dir, local::kHolderLock, O_RDONLY | O_CREAT | O_NOFOLLOW, 0644);
  if (!lock.ok()) {
    // No .capsule/ folder (not a capsule) or one this user cannot change: say why not held.
    CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(capsule_dir));
    return lock.status();
  }
  while (::flock(lock->get(), LOCK_SH) != 0) {
    if (errno != EINTR) return Status::IOError(lock_path + ": flock", errno);
  }
  CAPSULE_RETURN_IF_ERROR(CheckHeldForWrite(capsule_dir));
  return lock;
}

Result<HolderRecord> AdoptCopy(const std::string& capsule_dir) {
  const std::string lock_path = JoinPath(capsule_dir, local::kHolderLock);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd lock, OpenBeneath(capsule_dir, local::kHolderLock, O_RDWR | O_CREAT | O_NOFOLLOW, 0644));
  while (::flock(lock.get(), LOCK_EX) != 0) {
    if (errno != EINTR) return Status::IOError(lock_path + ": flock", errno);
  }
  CAPSULE_ASSIGN_OR_RETURN(LoadedRecord loaded, LoadRecord(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(std::string here, FolderIdentity(capsule_dir));
  if (loaded.folder.empty() || loaded.folder == here) {
    return Status::FailedPrecondition(capsule_dir, "is not a copy: its holder record was written in this folder; "
                                                   "nothing to adopt");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string hex, RandomHex(8));
  HolderRecord record = loaded.record;
  record.machine = "m-" + hex;
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(capsule_dir, local::kMachine), record.machine + "\n"));
  CAPSULE_RETURN_IF_ERROR(record.Save(capsule_dir));
  // The manifest names its holder too; it follows (no digest covers that field).
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(capsule_dir));
  manifest.holder_machine = record.machine;
  CAPSULE_RETURN_IF_ERROR(manifest.Save(capsule_dir));
  return record;
}

Status RebindHolderRecord(const std::string& from, const std::string& to) {
  CAPSULE_ASSIGN_OR_RETURN(LoadedRecord loaded, LoadRecord(from));
  CAPSULE_ASSIGN_OR_RETURN(std::string identity, FolderIdentity(from));
  if (!loaded.folder.empty() && loaded.folder != identity) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(from, local::kHolder));
    return WriteFileAtomic(JoinPath(to, local::kHolder), text);
  }
  return loaded.record.Save(to);
}

}  // namespace capsule
