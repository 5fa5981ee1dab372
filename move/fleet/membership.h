// A sidecar's membership of the fleet: its entry /capsulefs/sidecars/<name> under a lease of
// ttl seconds, kept alive every ttl/3, and the check, each round, that every agent it holds is
// still its own in the registry (move/fleet/registry.h).
//
// The lease rule (capsule-protocol(7), FLEET): a sidecar that has not renewed its lease for
// half its TTL, counted from when it sent the last renewal etcd answered (etcd keeps the
// lease at least TTL from that moment), retires every agent it holds: their mounts flip
// read-only (the mount's watch of its holder record, fs/state.cc). Each request to etcd has a
// quarter of the TTL, and the deadline is checked every 100 ms, so by the time etcd lets the
// lease expire and another sidecar may be granted an agent, this one writes nothing. An
// agent whose record names another holder, a newer epoch or "retired" is retired here too.
//
// Thread-safety: Run loops on its own thread; lease() and url() may be read from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "move/fleet/etcd_client.h"
#include "move/fleet/registry.h"

namespace capsule::fleet {

// An agent held by this sidecar (active or frozen), as its holder record says.
struct HeldAgent {
  std::string agent;
  uint64_t epoch = 0;
};

struct MemberHooks {
  // The agents held here now.
  std::function<std::vector<HeldAgent>()> held;
  // Retires the agent here (its mount flips read-only), saying why.
  std::function<void(const std::string& agent, uint64_t epoch, const std::string& why)> retire;
  // A line for the sidecar's log: event ("fleet"), words.
  std::function<void(const std::string& event, const std::string& words)> note;
  // Told each lease this sidecar joins under (the first, and each after one was lost).
  std::function<void(int64_t lease)> joined;
};

class FleetMember {
 public:
  FleetMember(FleetOptions options, std::string name, std::string address, int64_t ttl_seconds, MemberHooks hooks);

  // Grants the first lease and registers; a failure refuses the sidecar's start.
  Status Join();
  // Keeps the lease alive and checks the agents held, forever (run on a thread of its own).
  void Run();

  int64_t lease() const { return lease_; }
  int64_t ttl() const { return ttl_; }
  const std::string& name() const { return name_; }
  const FleetOptions& options() const { return etcd_.options(); }

 private:
  Status Register();
  void CheckHeld();
  void RetireAll(const std::string& why);

  EtcdClient etcd_;
  std::string name_, address_;
  int64_t ttl_;
  MemberHooks hooks_;
  std::atomic<int64_t> lease_{0};
  std::vector<std::string> registered_agents_;
};

}  // namespace capsule::fleet
