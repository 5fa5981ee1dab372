#include "move/fleet/membership.h"

#include <algorithm>
#include <chrono>
#include <thread>

namespace capsule::fleet {

namespace {

using Clock = std::chrono::steady_clock;

// Each request may take a quarter of the TTL at most, so that a stuck one cannot eat the
// time the lease rule leaves.
FleetOptions Quick(FleetOptions options, int64_t ttl_seconds) {
  options.timeout_ms = static_cast<int>(std::clamp<int64_t>(ttl_seconds * 250, 200, options.timeout_ms));
  return options;
}

}  // namespace

FleetMember::FleetMember(FleetOptions options, std::string name, std::string address, int64_t ttl_seconds,
                         MemberHooks hooks)
    : etcd_(Quick(std::move(options), ttl_seconds)),
      name_(std::move(name)),
      address_(std::move(address)),
      ttl_(ttl_seconds),
      hooks_(std::move(hooks)) {}

Status FleetMember::Register() {
  std::vector<std::string> agents;
  for (const HeldAgent& held : hooks_.held()) agents.push_back(held.agent);
  SidecarEntry entry{name_, address_, agents, ttl_, 0};
  CAPSULE_ASSIGN_OR_RETURN(int64_t revision, etcd_.Put(std::string(kSidecarsPrefix) + name_, SidecarJson(entry), lease_));
  (void)revision;
  registered_agents_ = agents;
  return Status::Ok();
}

Status FleetMember::Join() {
  Result<int64_t> lease = etcd_.GrantLease(ttl_);
  if (!lease.ok()) return lease.status().WithContext("--fleet " + etcd_.options().url);
  lease_ = *lease;
  if (Status registered = Register(); !registered.ok()) return registered.WithContext("--fleet " + etcd_.options().url);
  if (hooks_.joined) hooks_.joined(lease_);
  return Status::Ok();
}

void FleetMember::RetireAll(const std::string& why) {
  for (const HeldAgent& held : hooks_.held()) hooks_.retire(held.agent, held.epoch, why);
}

void FleetMember::CheckHeld() {
  for (const HeldAgent& held : hooks_.held()) {
    Result<std::optional<HolderOfRecord>> record = ReadHolder(etcd_, held.agent);
    if (!record.ok()) return;  // etcd cannot say: the lease rule covers that
    if (!record->has_value()) {
      // An agent this sidecar held before the fleet knew it: offered to the registry at its
      // epoch, and retired here if another live holder has it.
      Status claimed = ClaimFresh(etcd_, held.agent, name_, held.epoch);
      if (claimed.ok()) {
        hooks_.note("fleet", "agent=" + held.agent + " epoch=" + std::to_string(held.epoch) + ": registered as held here");
      } else if (claimed.code() == Code::kFailedPrecondition) {
        hooks_.retire(held.agent, held.epoch, "the registry refused epoch " + std::to_string(held.epoch) + ": " +
                                                  claimed.message());
      }
      continue;
    }
    const HolderOfRecord& now = **record;
    if (now.sidecar == name_ && now.epoch == held.epoch && now.state == "active") continue;
    if (now.sidecar == name_ && now.epoch < held.epoch) continue;  // a move in, its claim on its way
    hooks_.retire(held.agent, held.epoch,
                  "epoch " + std::to_string(held.epoch) + " is stale: the record names " + now.sidecar + " at epoch " +
                      std::to_string(now.epoch) + " (" + now.state + ")");
  }
  std::vector<std::string> agents;
  for (const HeldAgent& held : hooks_.held()) agents.push_back(held.agent);
  if (agents != registered_agents_) (void)Register();
}

void FleetMember::Run() {
  const auto round = std::chrono::milliseconds(ttl_ * 1000 / 3);
  const auto give_up = std::chrono::milliseconds(ttl_ * 1000 / 2);
  const auto tick = std::min<std::chrono::milliseconds>(round, std::chrono::milliseconds(100));
  Clock::time_point renewed = Clock::now();  // when the last renewal etcd answered was sent
  Clock::time_point next = renewed + round;
  bool lost = false;
  auto lose = [&](const std::string& why) {
    lost = true;
    hooks_.note("fleet", "lease lost: " + why + "; every agent held here is retired (read-only)");
    RetireAll("the lease was lost: " + why);
  };
  for (;;) {
    std::this_thread::sleep_for(tick);
    const Clock::time_point now = Clock::now();
    if (!lost && now - renewed > give_up) {
      lose("lease " + std::to_string(lease_) + " not renewed for " +
           std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - renewed).count()) + " ms");
    }
    if (now < next) continue;
    next = now + round;
    if (lost) {
      // Rejoin under a new lease: the agents retired here are no longer listed.
      if (Join().ok()) {
        lost = false;
        renewed = now;
        hooks_.note("fleet", "joined again: lease " + std::to_string(lease_) + ", ttl " + std::to_string(ttl_) + " s");
      }
      continue;
    }
    Result<int64_t> ttl = etcd_.KeepAlive(lease_);
    if (ttl.ok() && *ttl > 0) {
      renewed = now;
      CheckHeld();
    } else if (ttl.ok()) {
      lose("lease " + std::to_string(lease_) + " expired in etcd");
    }
  }
}

}  // namespace capsule::fleet
