// Who holds the agent: this machine's identity for a capsule and its holder record, both in
// the capsule's local folder .capsule/ (never exported, never sent).
//
// .capsule/machine       this machine's id for the capsule: "m-" and 16 hex digits, made once
// .capsule/holder.json   {"agent","epoch","machine","move"?,"state"}, state active, frozen or
//                        retired; "move" names the move out that froze it, when one did, and
//                        "admin_freeze" (true) says an admin had frozen it before that move
// .capsule/holder.lock   flock(2)ed by every change of holder.json (TransitionHolder)
//
// holder.json also names the folder it was written in ("folder": inode and birth time). A
// copy of the folder (cp -a, rsync, a restore) carries a record that names another folder:
// Load refuses it (FailedPrecondition), so the copy is not held here and runs nothing, until
// AdoptCopy (capsule adopt) gives it a machine id and a record of its own.
//
// A capsule with no holder record is not held here: reading it is fine, changing it is not.
// Fail safe: when the record is missing or unreadable, this machine does not run the agent.
//
// A held record changes only through TransitionHolder: a compare-and-set from the states the
// caller expects, under the record's lock, so that the mount, the mover, the command line and
// the sidecar never overwrite each other's decision (a thaw can never revive a record a
// mover retired). HolderRecord::Save writes a new record into a folder no one else uses yet
// (a capsule being created, imported or staged).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule {

enum class HolderState { kActive, kFrozen, kRetired };

const char* HolderStateName(HolderState state);

struct HolderRecord {
  std::string agent;
  std::string machine;
  uint64_t epoch = 0;
  HolderState state = HolderState::kRetired;
  // When frozen for a move out: that move's id. Only that move may thaw it (its rollback);
  // anyone else is told to resolve the move (capsule move --recover).
  std::string move;
  // The move took over an admin's freeze: its rollback gives that freeze back (the record
  // stays frozen, for no move) rather than thawing.
  bool admin_freeze = false;

  static Result<HolderRecord> Load(const std::string& capsule_dir);
  // A new record, written atomically through the durable-write path. Not for a record in
  // use: that changes through TransitionHolder.
  Status Save(const std::string& capsule_dir) const;
};

struct HolderTransition {
  std::initializer_list<HolderState> from;  // the states the record may be in
  HolderState to;
  // Freezing for a move: the move's id, written into the record (a move takes over an
  // admin's freeze). Thawing: the move the caller speaks for ("" for none), which must be the
  // move the record names, if any; a move that took over an admin's freeze gives it back, so
  // the record stays frozen (for no move) and the caller leaves writers waiting.
  std::string move;
};

// Changes the holder record of the capsule at `capsule_dir` under flock(LOCK_EX) on
// .capsule/holder.lock, held across the read and the write. A record already in `to` is left
// as it is (a transition may be retried); one in a state of `from` gets `to`; any other, a
// missing one included, is refused with FailedPrecondition saying what the record says.
// With `at_epoch`, the record must also be at that epoch: a decision taken for one epoch
// never changes a record that has moved on. Returns the record as it is afterwards.
Result<HolderRecord> TransitionHolder(const std::string& capsule_dir, const HolderTransition& transition,
                                      std::optional<uint64_t> at_epoch = std::nullopt);

// Makes the copied capsule at `capsule_dir` (see above) a holder of its own: a new machine id
// and its record bound to this folder, state and epoch kept. Its journal then chains under the
// new id, so it merges with the original's. Refused when the folder is not a copy.
Result<HolderRecord> AdoptCopy(const std::string& capsule_dir);

// Writes the holder record of `from` into `to`, a folder about to take `from`'s place (a
// staging area placed by rename), bound to `to`. A record that was already a copy's stays one.
Status RebindHolderRecord(const std::string& from, const std::string& to);

// This machine's id for the capsule, made and stored on first use.
Result<std::string> LoadOrCreateMachineId(const std::string& capsule_dir);

// Ok when this machine holds the capsule and may change it (its record says active);
// otherwise FailedPrecondition saying why not.
Status CheckHeldForWrite(const std::string& capsule_dir);
// CheckHeldForWrite under a shared lock on the holder record, returned held: no transition
// (freeze, retire) runs until it is closed, so a change checked here lands before a freeze
// or not at all. Take it after any lock of the thing written (the journal's), never before.
Result<UniqueFd> HoldForWrite(const std::string& capsule_dir);
// Ok when this machine holds the capsule, active or frozen (a writer that lives across a
// freeze, such as a mount, may open it; each change still needs CheckHeldForWrite).
Status CheckHeldHere(const std::string& capsule_dir);

}  // namespace capsule
