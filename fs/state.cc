// The mount's states as the holder record and the control channel change them: freeze (commit
// what is in flight, checkpoint, verify), thaw, retire (read-only for good), the half-second
// watch of the holder record, and the status the control channel reports.
#include <fcntl.h>
#include <sys/mount.h>
#include <syslog.h>

#include <cerrno>
#include <chrono>
#include <iostream>
#include <optional>
#include <mutex>
#include <set>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/parallel.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/verify.h"
#include "fs/capsule_fs.h"

namespace capsule::fs {

Result<uint64_t> CapsuleFs::Freeze(const std::string& move, std::chrono::seconds timeout) {
  const HolderTransition freeze{{HolderState::kActive}, HolderState::kFrozen, move};
  uint64_t read_before = verified_blobs_.files_read();
  Status frozen = gate_.Freeze([&]() -> Status {
    CAPSULE_RETURN_IF_ERROR(CommitAll());
    VerifyOptions verify;
    verify.blob_digests = &verified_blobs_;
    // Right after a preverify, the blobs it read are taken as it found them: only this mount
    // has written the folder since, and it never rewrites a blob. The manifest and snapshot
    // just written are checked against their digests, not parsed again, and the blobs folder
    // as the checkpoint listed it.
    verify.trust_remembered_blobs = preverified_.exchange(false);
    SavedCapsule saved;
    if (Status checkpointed = Checkpoint(&saved, &verify); !checkpointed.ok()) {
      // Not as far as the verify: the preverify still holds for the next freeze.
      if (verify.trust_remembered_blobs) preverified_ = true;
      return checkpointed;
    }
    CAPSULE_ASSIGN_OR_RETURN(VerifyReport report, VerifySavedFolder(options_.dir, saved, verify));
    if (!report.ok()) return Status::Corruption(options_.dir, "does not verify: " + report.problems.front());
    return TransitionHolder(options_.dir, freeze).status();
  });
  if (!frozen.ok()) return frozen;
  // Frozen before this call (by an admin, or by this move asking again): the record says by
  // whom, and a freeze for a move takes over an admin's.
  CAPSULE_RETURN_IF_ERROR(TransitionHolder(options_.dir, {{HolderState::kActive, HolderState::kFrozen},
                                                          HolderState::kFrozen, move})
                              .status());
  // An admin's timeout counts from now; a move's freeze, or an admin's without one, has none.
  gate_.SetThawDeadline(move.empty() && timeout.count() > 0
                            ? std::optional(std::chrono::steady_clock::now() + timeout)
                            : std::nullopt);
  return verified_blobs_.files_read() - read_before;
}

Result<uint64_t> CapsuleFs::PreVerify() {
  // Listed and read beneath the blobs folder held open: a link put in a blob's place fails.
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, blobs_.ListTree());
  std::vector<std::string> names, paths;
  for (const TreeEntry& entry : tree) {
    if (entry.type != TreeEntry::Type::kFile || IsTempDebris(entry.path)) continue;
    names.push_back(entry.path);
    paths.push_back(blobs_.PathOf(entry.path));
  }
  uint64_t read_before = verified_blobs_.files_read();
  std::mutex failure_mu;
  Status failure;
  // On every core, as a freeze's verify would: the move this serves waits for it.
  ParallelFor(paths.size(), 0, [&](size_t i) {
    if (preverify_cancelled_) return;
    Result<UniqueFd> fd = blobs_.OpenFile(names[i], O_RDONLY);
    Result<std::string> digest = fd.ok() ? verified_blobs_.Sha256Opened(fd->get(), paths[i], nullptr) : fd.status();
    // A blob removed meanwhile (a checkpoint dropped it) is no error: nothing to remember.
    if (digest.ok() || digest.status().code() == Code::kNotFound) return;
    std::lock_guard lock(failure_mu);
    if (failure.ok()) failure = digest.status();
  });
  if (preverify_cancelled_) return Status::Unavailable("preverify", "the mount is stopping");
  CAPSULE_RETURN_IF_ERROR(failure);
  verified_blobs_.KeepOnly(std::set<std::string>(paths.begin(), paths.end()));
  preverified_ = true;
  return verified_blobs_.files_read() - read_before;
}

Status CapsuleFs::Thaw(const std::string& move) {
  // An admin's thaw of a mount already thawed is done, as a second freeze is (capsule(1),
  // CONVENTIONS); a move's thaw still needs the freeze it names.
  if (move.empty() && gate_.state() == MountState::kActive) return Status::Ok();
  if (gate_.state() != MountState::kFrozen) {
    return Status::FailedPrecondition("thaw", std::string("the mount is ") + MountStateName(gate_.state()));
  }
  Result<HolderRecord> thawed =
      TransitionHolder(options_.dir, {{HolderState::kFrozen}, HolderState::kActive, move});
  if (!thawed.ok()) {
    // A record retired meanwhile (a mover's decision, its "retire" still on its way) retires
    // the mount now: a thaw never revives it.
    Result<HolderRecord> record = HolderRecord::Load(options_.dir);
    if (!record.ok() || record->state == HolderState::kRetired) (void)Retire();
    return thawed.status();
  }
  // A move that took over an admin's freeze gave it back: writers keep waiting.
  if (thawed->state == HolderState::kFrozen) return Status::Ok();
  gate_.Thaw();
  return Status::Ok();
}

void CapsuleFs::ThawIfDue() {
  if (!gate_.ThawIsDue()) return;
  Status thawed = Thaw();
  gate_.SetThawDeadline(std::nullopt);  // thawed, or refused (a move froze it meanwhile): done either way
  std::string line = thawed.ok() ? "the freeze's timeout has passed: thawed, writes go on"
                                 : "the freeze's timeout has passed but the thaw was refused: " + thawed.message();
  std::cerr << "capsulefs: " << options_.dir << ": " << line << "\n";
  ::syslog(LOG_NOTICE, "capsulefs: %s: %s", options_.dir.c_str(), line.c_str());
}

Status CapsuleFs::Retire() {
  Result<HolderRecord> retired =
      TransitionHolder(options_.dir, {{HolderState::kActive, HolderState::kFrozen}, HolderState::kRetired, ""});
  // Whatever the record says: a mount told to retire never takes a write again (fail safe).
  gate_.Retire();
  // Makes the mount read-only for the kernel too, so that statfs reports ST_RDONLY. The
  // kernel refuses while a file is open for writing there, so it is retried for a while.
  std::thread([mountpoint = options_.mountpoint] {
    for (int i = 0; i < 600; ++i) {
      if (::mount(nullptr, mountpoint.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0) return;
      if (errno != EBUSY) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }).detach();
  // No record at all is no error here: this machine does not hold the agent either way.
  if (!retired.ok() && PathExists(JoinPath(options_.dir, local::kHolder))) return retired.status();
  return Status::Ok();
}

void CapsuleFs::CheckHolder() {
  MountState state = gate_.state();
  if (state != MountState::kActive && state != MountState::kFrozen) return;
  Result<HolderRecord> record = HolderRecord::Load(options_.dir);
  if (!record.ok() || record->state == HolderState::kRetired) (void)Retire();
}

Result<std::string> CapsuleFs::StatusJson() {
  Json json = {{"state", MountStateName(gate_.state())}};
  Result<HolderRecord> record = HolderRecord::Load(options_.dir);
  std::shared_lock lock(tree_mu_);
  json["agent"] = manifest_->agent.id;
  json["epoch"] = record.ok() ? record->epoch : manifest_->holder_epoch;
  json["dir"] = options_.dir;  // the capsule folder behind the mount, for capsule move
  json["writes_waiting"] = gate_.waiting();  // changes of content waiting for a thaw now
  json["workspace_reads"] = workspace_reads_.load(std::memory_order_relaxed);
  return CanonicalJson(json, "status");
}

}  // namespace capsule::fs
