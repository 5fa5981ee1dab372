#include "move/sidecar_fleet.h"

#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "move/fleet/registry.h"

namespace capsule::move {

namespace {

// The agents held under `root` (active or frozen), by their holder records.
std::vector<fleet::HeldAgent> HeldUnder(const std::string& root) {
  std::vector<fleet::HeldAgent> held;
  Result<std::vector<TreeEntry>> entries = ListTree(root, {kStagingDir});
  if (!entries.ok()) return held;
  for (const TreeEntry& entry : *entries) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos ||
        entry.path[0] == '.') {
      continue;
    }
    Result<HolderRecord> record = HolderRecord::Load(JoinPath(root, entry.path));
    if (!record.ok() || record->state == HolderState::kRetired) continue;
    held.push_back({record->agent, record->epoch});
  }
  return held;
}

}  // namespace

Result<fleet::FleetOptions> FleetClientOptions(const std::string& url, const std::string& cacert,
                                               const std::string& cert, const std::string& key) {
  CAPSULE_ASSIGN_OR_RETURN(fleet::FleetOptions options, fleet::ParseFleetUrl(url));
  if (cacert.empty() && (!cert.empty() || !key.empty())) {
    return Status::InvalidArgument("--fleet-cert", "needs --fleet-cacert (TLS to etcd)");
  }
  for (const std::string& file : {cacert, cert, key}) {
    if (!file.empty() && !PathExists(file)) return Status::NotFound(file, "no such file (TLS to etcd)");
  }
  options.cacert = cacert;
  options.cert = cert;
  options.key = key;
  return options;
}

Result<std::unique_ptr<fleet::FleetMember>> JoinFleet(const FleetArgs& args, const std::string& root,
                                                      const std::string& address, MoveTarget* target,
                                                      SidecarState* log) {
  if (Status name = CheckAgentId(args.name); !name.ok()) {
    return Status::InvalidArgument("--fleet-name '" + args.name + "'", "needs letters, digits, '.', '_', '-'");
  }
  if (args.ttl_seconds < 3) return Status::InvalidArgument("--fleet-ttl", "at least 3 seconds");
  CAPSULE_ASSIGN_OR_RETURN(fleet::FleetOptions options, FleetClientOptions(args.url, args.cacert, args.cert, args.key));
  auto etcd = std::make_shared<fleet::EtcdClient>(options);
  const std::string name = args.name;
  target->set_claim_holder([etcd, name, log](const std::string& agent, const std::string& move,
                                             uint64_t epoch) -> Result<std::function<void()>> {
    CAPSULE_ASSIGN_OR_RETURN(fleet::Claim claim, fleet::ClaimHolder(*etcd, agent, move, name, epoch));
    log->Note("fleet", "claimed agent=" + agent + " move=" + move + " epoch=" + std::to_string(epoch) +
                           ": the holder of record is " + name + " (revision " + std::to_string(claim.revision) + ")");
    return std::function<void()>([etcd, claim, agent, log] {
      Status undone = fleet::UndoClaim(*etcd, agent, claim);
      log->Note("fleet", "agent=" + agent + ": the activation was undone; the holder of record " +
                             (undone.ok() ? "is put back" : "could not be put back: " + undone.message()));
    });
  });
  fleet::MemberHooks hooks;
  hooks.held = [root] { return HeldUnder(root); };
  hooks.retire = [root, log](const std::string& agent, uint64_t epoch, const std::string& why) {
    // The mount's watch of its holder record flips it read-only (fs/state.cc).
    Result<HolderRecord> retired = TransitionHolder(
        JoinPath(root, agent), {{HolderState::kActive, HolderState::kFrozen}, HolderState::kRetired, ""}, epoch);
    log->Note("fleet", "retired agent=" + agent + " epoch=" + std::to_string(epoch) + ": " + why +
                           (retired.ok() ? "" : " (not retired: " + retired.status().message() + ")"));
  };
  hooks.note = [log](const std::string& event, const std::string& words) { log->Note(event, words); };
  const std::string url = args.url;
  const int64_t ttl = args.ttl_seconds;
  hooks.joined = [log, url, name, ttl](int64_t lease) { log->SetFleet(url, name, lease, ttl); };
  auto member = std::make_unique<fleet::FleetMember>(options, name, address, ttl, hooks);
  CAPSULE_RETURN_IF_ERROR(member->Join());
  char lease[32];
  std::snprintf(lease, sizeof lease, "%llx", static_cast<unsigned long long>(member->lease()));
  log->Note("fleet", "member of " + url + " as " + name + ": lease " + lease + ", ttl " + std::to_string(ttl) + " s");
  std::thread([member = member.get()] { member->Run(); }).detach();
  return member;
}

}  // namespace capsule::move
