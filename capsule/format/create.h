// Making a new capsule: every file of the layout, a workspace, a manifest listing each file,
// and this machine as its holder at epoch 1. The capsule appears whole or not at all.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capsule/base/progress.h"
#include "capsule/base/status.h"
#include "capsule/format/manifest.h"

namespace capsule {

struct CreateOptions {
  AgentInfo agent;
  // A local folder whose files become the workspace (files/ in a mount).
  std::optional<std::string> workspace_source;
  // Phase "workspace": the source's bytes and files stored, of all.
  Progress* progress = nullptr;
};

// Creates the capsule at `dir`, which must be absent or an empty folder.
Status CreateCapsule(const std::string& dir, const CreateOptions& options);

// A manifest listing every file now under `capsule_dir` (but manifest.json, .capsule/ and
// temporary debris), with the given identity and holder.
Result<Manifest> BuildManifest(const std::string& capsule_dir, const AgentInfo& agent,
                               const std::string& holder_machine, uint64_t holder_epoch);

// A fresh staging folder beside `dir` (same file system, so a rename can place it), named as
// temporary debris so that a crash leaves nothing that looks like content. The parents of
// `dir` it had to make are added to `made_parents` (when given, outermost first), for a
// refused command to take away with RemoveMadeParents: it leaves no folder behind.
Result<std::string> MakeStagingDir(const std::string& dir, std::vector<std::string>* made_parents = nullptr);
// Removes the folders MakeStagingDir made, innermost first, each only while empty.
void RemoveMadeParents(const std::vector<std::string>& made_parents);

// Places the finished folder `staging` at `dir` (absent or empty) in one rename.
Status PlaceStagingDir(const std::string& staging, const std::string& dir);

}  // namespace capsule
