#include "journal/accept_edits.h"

#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/mount_lock.h"
#include "journal/journal.h"

namespace capsule::journal {

namespace {

Json DigestJson(const std::optional<FileDigest>& digest) {
  if (!digest) return nullptr;
  return {{"sha256", digest->sha256}, {"size", digest->size}};
}

}  // namespace

Json EditsJson(const std::vector<AcceptedEdit>& edits) {
  Json listed = Json::array();
  for (const AcceptedEdit& edit : edits) {
    listed.push_back({{"path", edit.path}, {"before", DigestJson(edit.before)}, {"after", DigestJson(edit.after)}});
  }
  return listed;
}

Status AcceptEditsRecorded(const std::string& dir, const std::vector<AcceptedEdit>& edits) {
  if (edits.empty()) return Status::Ok();
  return AcceptEdits(dir, edits, [&]() -> Status {
    CAPSULE_ASSIGN_OR_RETURN(Journal journal, Journal::OpenForWrite(dir));
    return journal.Append("edits_accepted", {{"edits", EditsJson(edits)}}).status();
  });
}

Result<std::vector<AcceptedEdit>> AcceptEditsIfAny(const std::string& dir) {
  CAPSULE_RETURN_IF_ERROR(CheckCapsuleFolder(dir));  // nothing is made in a folder that is none
  {
    // A mounted capsule is vouched for by its mount; at rest, no mount starts while it is
    // checked.
    Result<UniqueFd> at_rest = LockForMount(dir);
    if (!at_rest.ok()) {
      if (at_rest.status().code() == Code::kAlreadyExists) return std::vector<AcceptedEdit>();
      return at_rest.status();
    }
    if (CheckTrusted(dir).ok()) return std::vector<AcceptedEdit>();
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<AcceptedEdit> edits, FindEdits(dir));
  CAPSULE_RETURN_IF_ERROR(AcceptEditsRecorded(dir, edits));
  return edits;
}

}  // namespace capsule::journal
