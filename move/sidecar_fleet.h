// A sidecar in a fleet (capsule serve --fleet): its activate made the transaction that names it
// the holder of record (move/fleet/registry.h), and its membership under a lease kept alive,
// retiring the agents held here when the lease is lost or the record names another holder
// (move/fleet/membership.h). See man/capsule-protocol.7, FLEET.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "capsule/base/status.h"
#include "move/fleet/membership.h"
#include "move/move_target.h"
#include "move/sidecar_state.h"

namespace capsule::move {

// capsule serve's fleet options; no url: no fleet, the sidecar works as it does alone.
struct FleetArgs {
  std::string url;                // --fleet etcd://H:P[,H:P...]
  std::string cacert, cert, key;  // --fleet-cacert, --fleet-cert, --fleet-key
  std::string name;               // --fleet-name: this sidecar's name in the registry
  int ttl_seconds = 10;           // --fleet-ttl: its lease's time to live
};

// Opens the fleet's client the same way for every command: the URL parsed, TLS when a CA is
// given.
Result<fleet::FleetOptions> FleetClientOptions(const std::string& url, const std::string& cacert,
                                               const std::string& cert, const std::string& key);

// Joins the fleet: grants the lease, registers `address` under it, sets `target`'s activate
// to claim the holder of record, and starts the thread that keeps the lease alive. Refused
// when etcd cannot be reached or the name is not one.
Result<std::unique_ptr<fleet::FleetMember>> JoinFleet(const FleetArgs& args, const std::string& root,
                                                      const std::string& address, MoveTarget* target,
                                                      SidecarState* log);

}  // namespace capsule::move
