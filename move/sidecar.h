// The sidecar, `capsule serve`: receives moves into a root folder of capsules over TLS 1.3,
// resolves the moves out of it that an earlier run left mid-way, and, with a mount folder,
// mounts each capsule it takes over (capsulefs) and unmounts a retired copy it mounted when
// the agent is offered back. See man/capsule-protocol.7.
//
// Thread-safety: RunSidecar runs on the calling thread, which only accepts connections and
// admits them (move/door.h); each admitted connection has a thread of its own for its
// handshake and its calls. What they share (the MoveTarget, the door, the log) is thread-safe.
#pragma once

#include <string>

#include "capsule/base/status.h"
#include "move/door.h"
#include "move/move_target.h"
#include "move/sidecar_fleet.h"

namespace capsule::move {

struct SidecarOptions {
  std::string root;      // ROOT/<agent-id> holds each capsule
  std::string listen;    // HOST:PORT; port 0 picks one
  std::string cert, key, ca;  // this sidecar's TLS identity and the CA peers chain to
  std::string seal_key;  // X25519 private key switches are sealed to
  std::string mount_to;  // when set, mount each capsule taken over at MOUNT_TO/<agent-id>
  // When set, build (or find in this cache) each arriving agent's sandbox before the move can
  // activate (MoveTarget::set_sandbox_cache).
  std::string sandbox_cache;
  // Who may open a connection, and how long a handshake may take (move/door.h).
  DoorLimits door;
  // How long a move in flight may go without a word from its source before it is rolled
  // back, and how many one source may have in flight (move/move_target.h).
  StagingLimits staging;
  // With a url: a member of the fleet on etcd (move/sidecar_fleet.h).
  FleetArgs fleet;
  // When set, HOST:PORT where the sidecar's numbers are served to Prometheus (plain HTTP,
  // GET /metrics; move/sidecar_metrics.h); port 0 picks one.
  std::string metrics;
  // Log lines as JSON objects rather than text (move/sidecar_state.h, LogSink).
  bool log_json = false;
};

// Listens, prints "listening on HOST:PORT", "seal key HEX" (and, with metrics, "metrics on
// HOST:PORT") on standard output (and tells
// systemd READY=1, move/service_notify.h), and serves until SIGTERM or SIGINT. Then no call
// begins any more (move/call_gate.h), the calls in progress are given 60 s to finish, every
// move in that did not activate is rolled back, and it returns Ok, leaving connections still
// open to end with the process. A failure to start (a key, the root, the address) is returned
// at once.
Status RunSidecar(const SidecarOptions& options);

}  // namespace capsule::move
