#include "move/local_capsule.h"

#include "capsule/base/file_io.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/layout.h"
#include "fs/control_client.h"

namespace capsule::move {

Result<LocalCapsule> LocalCapsule::Open(const std::string& source) {
  LocalCapsule capsule;
  Result<std::string> socket = fs::FindControlSocket(source);
  if (socket.ok()) {
    Result<Json> status = fs::SendControl(*socket, "status");
    if (status.ok() && status->value("dir", Json()).is_string()) {
      capsule.socket_ = *socket;
      capsule.dir_ = (*status)["dir"];
      return capsule;
    }
    // A socket nobody answers is what a crashed mount leaves: the folder alone counts.
  }
  if (!PathExists(JoinPath(source, kManifestPath))) {
    return NotACapsule(source);
  }
  capsule.dir_ = source;
  return capsule;
}

void LocalCapsule::PrepareFreeze() {
  if (socket_) (void)fs::SendControl(*socket_, "preverify");
}

Status LocalCapsule::Freeze(const std::string& move) {
  if (socket_) return fs::SendControl(*socket_, "freeze " + move).status().WithContext("freeze " + dir_);
  return TransitionHolder(dir_, {{HolderState::kActive, HolderState::kFrozen}, HolderState::kFrozen, move}).status();
}

Status LocalCapsule::Thaw(const std::string& move) {
  if (socket_) {
    Result<Json> thawed = fs::SendControl(*socket_, "thaw " + move);
    if (thawed.ok()) return Status::Ok();
    // The mount is not frozen (it restarted, say): the record is what makes it writable.
  }
  return TransitionHolder(dir_, {{HolderState::kFrozen}, HolderState::kActive, move}).status();
}

Status LocalCapsule::Retire(uint64_t epoch) {
  // The record first: it is the decision (a thaw from now on is refused), and a mount that
  // misses the command below still sees it within half a second.
  CAPSULE_RETURN_IF_ERROR(
      TransitionHolder(dir_, {{HolderState::kActive, HolderState::kFrozen}, HolderState::kRetired, ""}, epoch).status());
  if (socket_) (void)fs::SendControl(*socket_, "retire");
  return Status::Ok();
}

}  // namespace capsule::move
