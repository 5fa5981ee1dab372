#include "move/local_capsule.h"

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "fs/control_client.h"

namespace capsule::move {

namespace {

Status SetState(const std::string& dir, HolderState from, HolderState to) {
  CAPSULE_ASSIGN_OR_RETURN(HolderRecord record, HolderRecord::Load(dir));
  if (record.state == to) return Status::Ok();
  if (record.state != from) {
    return Status::FailedPrecondition(dir, std::string("is ") + HolderStateName(record.state) + ", not " +
                                               HolderStateName(from));
  }
  record.state = to;
  return record.Save(dir);
}

}  // namespace

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
    return Status::NotFound(source, "neither a capsule folder nor a capsulefs mount");
  }
  capsule.dir_ = source;
  return capsule;
}

void LocalCapsule::PrepareFreeze() {
  if (socket_) (void)fs::SendControl(*socket_, "preverify");
}

Status LocalCapsule::Freeze() {
  if (socket_) return fs::SendControl(*socket_, "freeze").status().WithContext("freeze " + dir_);
  return SetState(dir_, HolderState::kActive, HolderState::kFrozen);
}

Status LocalCapsule::Thaw() {
  if (socket_) {
    Result<Json> thawed = fs::SendControl(*socket_, "thaw");
    if (thawed.ok()) return Status::Ok();
    // The mount is not frozen (it restarted, say): the record is what makes it writable.
  }
  return SetState(dir_, HolderState::kFrozen, HolderState::kActive);
}

Status LocalCapsule::Retire() {
  // The record first: it is the decision, and a mount that misses the command below still
  // sees it within half a second.
  CAPSULE_ASSIGN_OR_RETURN(HolderRecord record, HolderRecord::Load(dir_));
  if (record.state != HolderState::kRetired) {
    record.state = HolderState::kRetired;
    CAPSULE_RETURN_IF_ERROR(record.Save(dir_));
  }
  if (socket_) (void)fs::SendControl(*socket_, "retire");
  return Status::Ok();
}

}  // namespace capsule::move
