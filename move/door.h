// The sidecar's door: who may open a connection to `capsule serve`, and for how long a TLS
// handshake may take. Every connection is counted from its accept to its close, by the
// address of the peer (its host, not its port) and in all; a connection whose handshake is
// in progress is also counted as a handshake (man/capsule-protocol.7, THE DOOR).
//
//   - A connection past a limit on connections (--max-connections-per-peer, then
//     --max-connections) takes the place of a handshake in progress, of that peer first, or
//     is refused at once when none is in progress: only authenticated peers fill the door.
//   - A handshake past a limit on handshakes (--max-handshakes-per-peer, then
//     --max-handshakes) takes the place of one in progress: the oldest of that peer; at the
//     limit in all, the oldest of the peer with the most in progress. A real sidecar's
//     handshake takes milliseconds, so only one that stalls grows old.
//   - A handshake not done within --handshake-timeout seconds is given up.
//
// The door decides; the sidecar runs each handshake on a thread of its own and logs every
// refusal (move/sidecar.cc). A handshake that loses its place is woken through its pass's
// wake_fd() and given up by its thread.
//
// Thread-safety: every method of Door and of DoorPass may be called from any thread (one
// mutex); a DoorPass is used by the one thread that serves its connection.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "capsule/base/mutex.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"

namespace capsule::move {

struct DoorLimits {
  int handshake_timeout_seconds = 10;
  int max_connections = 64;            // open at once, in all
  int max_connections_per_peer = 16;   // open at once from one address
  int max_handshakes = 32;             // in progress at once, in all
  int max_handshakes_per_peer = 4;     // in progress at once from one address

  // InvalidArgument naming the flag when a limit is below 1, a peer's limit above the
  // limit in all, or a limit on handshakes above the one on connections.
  Status Check() const;
};

class Door;

// One admitted connection's place in the door, from its accept until it is destroyed (its
// connection closed). Counted as a handshake in progress until Authenticated().
class DoorPass {
 public:
  ~DoorPass();
  DoorPass(const DoorPass&) = delete;
  DoorPass& operator=(const DoorPass&) = delete;

  // Readable once the door gave this handshake's place to another: give the handshake up.
  int wake_fd() const;
  // Why the door gave this handshake's place away ("" while it has not).
  std::string dropped_why() const;
  // The handshake is done: from now on a connection, never dropped by the door.
  void Authenticated();

 private:
  friend class Door;
  struct Entry;
  DoorPass(Door* door, std::shared_ptr<Entry> entry) : door_(door), entry_(std::move(entry)) {}

  Door* door_;
  std::shared_ptr<Entry> entry_;
};

class Door {
 public:
  explicit Door(DoorLimits limits) : limits_(limits) {}

  // A connection from `host` ("127.0.0.1", "::1") is accepted: its pass, after taking the
  // place of handshakes in progress where a limit says so, or PermissionDenied saying which
  // limit refuses it.
  Result<std::unique_ptr<DoorPass>> Admit(const std::string& host);

  const DoorLimits& limits() const { return limits_; }

  // What the door counts now (for tests and messages).
  struct Counts {
    int connections = 0, handshakes = 0;
  };
  Counts CountsFor(const std::string& host);
  Counts CountsInAll();

 private:
  friend class DoorPass;
  using Entry = DoorPass::Entry;

  Counts CountLocked(const std::string* host) const;  // REQUIRES: mu_ held
  // Gives the place of handshake `victim` away, saying `why`. REQUIRES: mu_ held.
  void DropLocked(const std::shared_ptr<Entry>& victim, const std::string& why);
  // The oldest handshake in progress from `host`, or, for nullptr, the oldest of the peer with
  // the most in progress; null when none is. REQUIRES: mu_ held.
  std::shared_ptr<Entry> VictimLocked(const std::string* host) const;
  void Leave(const Entry* entry);

  const DoorLimits limits_;
  Mutex mu_;
  uint64_t next_ GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::shared_ptr<Entry>> entries_;  // by order of arrival; guarded by mu_
};

}  // namespace capsule::move
