// Who holds the agent: this machine's identity for a capsule and its holder record, both in
// the capsule's local folder .capsule/ (never exported, never sent).
//
// .capsule/machine       this machine's id for the capsule: "m-" and 16 hex digits, made once
// .capsule/holder.json   {"agent","epoch","machine","state"}, state active, frozen or retired
//
// A capsule with no holder record is not held here: reading it is fine, changing it is not.
// Fail safe: when the record is missing or unreadable, this machine does not run the agent.
#pragma once

#include <cstdint>
#include <string>

#include "capsule/base/status.h"

namespace capsule {

enum class HolderState { kActive, kFrozen, kRetired };

const char* HolderStateName(HolderState state);

struct HolderRecord {
  std::string agent;
  std::string machine;
  uint64_t epoch = 0;
  HolderState state = HolderState::kRetired;

  static Result<HolderRecord> Load(const std::string& capsule_dir);
  // Written atomically through the durable-write path.
  Status Save(const std::string& capsule_dir) const;
};

// This machine's id for the capsule, made and stored on first use.
Result<std::string> LoadOrCreateMachineId(const std::string& capsule_dir);

// Ok when this machine holds the capsule and may change it (its record says active);
// otherwise FailedPrecondition saying why not.
Status CheckHeldForWrite(const std::string& capsule_dir);

}  // namespace capsule
