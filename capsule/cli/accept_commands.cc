// capsule accept DIR: the files of a capsule edited behind its manifest, taken on purpose.
// Shows each file and what differs, records the change of trust in the journal (an
// edits_accepted event: each path and its digest before and after), then re-seals the
// manifest to the files as they were shown (capsule/format/trust.h). A mounted capsule is
// refused: its mount re-seals what it writes itself.
#include <iostream>
#include <memory>

#include "capsule/cli/cli.h"
#include "capsule/format/trust.h"
#include "journal/accept_edits.h"
#include "journal/owned/owned_state.h"

namespace capsule::cli {

namespace {

std::string DigestText(const std::optional<FileDigest>& digest) {
  if (!digest) return "(none)";
  return digest->sha256.substr(0, 12) + " (" + std::to_string(digest->size) + " bytes)";
}

int RunAccept(const std::string& given) {
  // A folder that is not a capsule is refused before anything is read or locked in it; a
  // mountpoint names its folder, which AcceptEdits then refuses as mounted.
  Result<std::string> resolved = ResolveCapsule(given);
  if (!resolved.ok()) return Fail(resolved.status());
  const std::string& path = *resolved;
  Result<std::vector<AcceptedEdit>> edits = FindEdits(path);
  if (!edits.ok()) return Fail(edits.status().WithContext("accept"));
  const Json listed = journal::EditsJson(*edits);
  if (edits->empty()) {
    if (JsonOutput()) return PrintJson({{"accepted", listed}});
    std::cout << "nothing to accept: the files are as the manifest lists them\n";
    return kExitOk;
  }
  if (!JsonOutput()) {
    for (const AcceptedEdit& edit : *edits) {
      std::cout << edit.path << ": " << edit.why << ": " << DigestText(edit.before) << " -> " << DigestText(edit.after)
                << "\n";
    }
  }
  Status accepted = journal::AcceptEditsRecorded(path, *edits);
  if (!accepted.ok()) return Fail(accepted.WithContext("accept"));
  Status followed = owned::FollowJournal(path);
  if (!followed.ok()) std::cerr << "capsule: warning: owned state not updated: " << followed.message() << "\n";
  if (JsonOutput()) return PrintJson({{"accepted", listed}});
  std::cout << "accepted " << edits->size() << (edits->size() == 1 ? " edit" : " edits")
            << "; the manifest lists the files as they are (journal: edits_accepted)\n";
  return kExitOk;
}

}  // namespace

Status AcceptEditsFirst(const std::string& dir) {
  Result<std::vector<AcceptedEdit>> taken = journal::AcceptEditsIfAny(dir);
  if (!taken.ok()) return taken.status().WithContext("--accept-edits");
  for (const AcceptedEdit& edit : *taken) {
    std::cerr << "capsule: --accept-edits: " << edit.path << ": " << edit.why << ": " << DigestText(edit.before)
              << " -> " << DigestText(edit.after) << "\n";
  }
  if (!taken->empty()) {
    std::cerr << "capsule: --accept-edits: accepted " << taken->size() << (taken->size() == 1 ? " edit" : " edits")
              << " (journal: edits_accepted)\n";
    Status followed = owned::FollowJournal(dir);
    if (!followed.ok()) std::cerr << "capsule: warning: owned state not updated: " << followed.message() << "\n";
  }
  return Status::Ok();
}

void RegisterAcceptCommands(CLI::App& app, int* exit_code) {
  auto dir = std::make_shared<std::string>();
  CLI::App* accept = app.add_subcommand(
      "accept", "Take files edited behind the manifest on purpose: show them, record it in the journal, re-seal");
  accept->add_option("DIR", *dir, "Capsule folder, not mounted")->required();
  AddJsonFlag(accept);
  accept->callback([dir, exit_code] { *exit_code = RunAccept(*dir); });
}

}  // namespace capsule::cli
