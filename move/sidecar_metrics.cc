#include "move/sidecar_metrics.h"

#include <dirent.h>
#include <sys/stat.h>

#include <cctype>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/local_files.h"

namespace capsule::move {

namespace {

// A code as a label value: "failed precondition" becomes failed_precondition.
std::string ReasonLabel(Code code) {
  std::string label;
  for (const char* c = CodeName(code); *c != '\0'; ++c) {
    if (*c == '/') continue;
    label += *c == ' ' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(*c)));
  }
  return label;
}

// The agents `root` holds active (ROOT/<agent-id> whose holder record says active).
double HeldAgents(const std::string& root) {
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(root.c_str()), &::closedir);
  if (!dir) return 0;
  double held = 0;
  while (struct dirent* entry = ::readdir(dir.get())) {
    if (entry->d_name[0] == '.' || entry->d_type != DT_DIR) continue;
    Result<HolderRecord> record = HolderRecord::Load(JoinPath(root, entry->d_name));
    if (record.ok() && record->state == HolderState::kActive) ++held;
  }
  return held;
}

// The bytes of the files under ROOT/.staging: moves in not yet activated.
double StagingBytes(const std::string& root) {
  Result<std::vector<TreeEntry>> entries = ListTree(JoinPath(root, kStagingDir));
  if (!entries.ok()) return 0;
  double bytes = 0;
  for (const TreeEntry& entry : *entries) {
    if (entry.type == TreeEntry::Type::kFile) bytes += static_cast<double>(entry.size);
  }
  return bytes;
}

}  // namespace

SidecarMetrics::SidecarMetrics(MetricsRegistry* registry, const std::string& root,
                               std::function<size_t()> moves_in_flight)
    : registry_(registry),
      started_(registry->AddCounter("capsule_sidecar_moves_started_total",
                                    "Moves into this sidecar begun: offers accepted.")),
      finished_(registry->AddCounter("capsule_sidecar_moves_finished_total",
                                     "Moves into this sidecar finished: agents activated here.")),
      rolled_back_(registry->AddCounter(
          "capsule_sidecar_moves_rolled_back_total",
          "Moves into this sidecar rolled back: aborted by the source, expired after its silence, or at a stop.")),
      moves_stuck_(registry->AddGauge("capsule_sidecar_moves_stuck",
                                      "Moves out of this root left mid-way by an earlier run and not yet resolved "
                                      "(their agents stay frozen).")),
      handshakes_(registry->AddGauge("capsule_sidecar_handshakes_in_progress", "TLS handshakes in progress.")),
      bytes_received_(registry->AddCounter("capsule_sidecar_bytes_received_total",
                                           "Bytes of Move Streams received (copy and switch calls).")),
      copy_seconds_(registry->AddHistogram("capsule_sidecar_copy_seconds",
                                           "Time of each copy call: the agent's files received while it runs.",
                                           DurationBuckets())),
      frozen_seconds_(registry->AddHistogram(
          "capsule_sidecar_frozen_seconds",
          "Time from a switch call's start (the source froze the agent) to its activation here.",
          DurationBuckets())) {
  registry->AddGaugeFunction("capsule_sidecar_moves_in_flight", "Moves into this sidecar begun and not yet ended.",
                             [read = std::move(moves_in_flight)] { return static_cast<double>(read()); });
  registry->AddGaugeFunction("capsule_sidecar_staging_bytes",
                             "Bytes of the files staged for moves in flight (ROOT/.staging).",
                             [root] { return StagingBytes(root); });
  registry->AddGaugeFunction("capsule_sidecar_held_agents", "Agents this root holds active.",
                             [root] { return HeldAgents(root); });
}

void SidecarMetrics::Event(const std::string& event, const std::string& call, const std::string& agent,
                           const std::string& move) {
  const std::string key = agent + "/" + move;
  if (event == "accepted") {
    started_.Add();
  } else if (event == "activated") {
    finished_.Add();
  } else if (event == "aborted" || event == "expired") {
    rolled_back_.Add();
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (event == "switch-begun") {
    frozen_since_[key] = std::chrono::steady_clock::now();
  } else if (event == "activated" || event == "aborted" || event == "expired" || event == "refused") {
    auto it = frozen_since_.find(key);
    if (it == frozen_since_.end()) return;
    if (event == "activated") {
      frozen_seconds_.Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - it->second).count());
    }
    if (event != "refused" || call != "query") frozen_since_.erase(it);
  }
}

void SidecarMetrics::Refused(const std::string& call, Code code) {
  registry_->AddCounter("capsule_sidecar_refusals_total", "Calls, connections and handshakes refused, by reason.",
                        {{"call", call}, {"reason", ReasonLabel(code)}})
      .Add();
}

}  // namespace capsule::move
