// What a sidecar (`capsule serve`) tells its operator: one log line per event on standard
// error, and a state file in its root that `capsule sidecar status` reads beside the holder
// records of the capsules there (man capsule-protocol.7, THE SIDECAR'S LOG AND STATUS).
//
//   2026-12-03T18:40:00Z serve: accepted offer agent=planner move=0123... epoch=2 peer=host-a
//   2026-12-03T18:40:02Z serve: refused switch agent=planner move=0123... epoch=2 peer=host-a why="..."
//
// Events: accepted (an offer), copied, switched, activated, aborted, refused (any call, with
// why), expired (a move in flight rolled back after its source fell silent; CALL is the phase
// it was in), recovered (at start: a staging area left mid-way emptied, or a move out resolved).
// At the door (move/door.h), before any call, one line per connection turned away:
//
//   2026-12-03T18:40:00Z serve: refused connection peer=10.0.0.9:50112 why="..."
//   2026-12-03T18:40:00Z serve: refused handshake peer=10.0.0.9:50113 why="..."
//   2026-12-03T18:40:10Z serve: dropped handshake peer=10.0.0.9:50114 why="..."
//   2026-12-03T18:41:00Z serve: failed connection peer="10.0.0.7:40100 (CN=host-a)" why="..."
//
// refused connection: a limit on connections; refused handshake: TLS refused the peer (no
// certificate, not the CA's, not TLS 1.3); dropped handshake: one that did not finish in time,
// that the peer left, or whose place went to a newer connection; failed connection: an
// authenticated connection ended by an error (a malformed message, a link gone silent).
// Every why= is quoted as JSON (control characters escaped), whatever the peer sent.
//
// Thread-safety: SidecarState is shared by every connection's thread (one mutex); the
// LoggedTarget of one connection is used by that connection's thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/canonical_json.h"
#include "capsule/base/metrics.h"
#include "capsule/base/status.h"
#include "move/sidecar_metrics.h"
#include "move/target_api.h"

namespace capsule::move {

// A move in flight, as `capsule sidecar status` shows it.
struct MoveInFlight {
  std::string direction;  // "in" (received here) or "out" (a move out of this root)
  std::string agent, move, phase, peer;  // in: offered, copied, switched; out: offered, frozen, activate-sent
  uint64_t epoch = 0;
  std::string since;  // UTC RFC 3339: when the move reached its phase
};

// How log lines are written: `json`, one JSON object a line ({"time", "program": "serve",
// "event", "call", "agent", "move", "epoch", "peer", "why"; "text" for a note}) instead of the
// text form above; `journal`, each line prefixed with its syslog priority ("<4>" for refused,
// dropped, failed and expired, "<5>" for the rest), which journald reads and strips.
struct LogSink {
  bool json = false;
  bool journal = false;
};
// The sink for `log`: journal when systemd connected it to journald (JOURNAL_STREAM).
LogSink LogSinkFor(bool json, FILE* log);

class SidecarState {
 public:
  // Log lines go to `log` (standard error for `capsule serve`) as `sink` says; the state file
  // is ROOT/.sidecar.json, written whole (WriteFileAtomic) at every change.
  SidecarState(std::string root, std::string listen, FILE* log, LogSink sink = {});

  // One log line: "TS serve: EVENT CALL agent=A move=M epoch=E peer=P[ why="..."]", counted
  // in metrics() (a refusal by `code`).
  void Log(const std::string& event, const std::string& call, const std::string& agent, const std::string& move,
           uint64_t epoch, const std::string& peer, const std::string& why = "", Code code = Code::kOk);
  // A line about a connection at the door: "TS serve: EVENT WHAT peer=P why="..."" (EVENT
  // refused, dropped or failed; WHAT connection or handshake).
  void LogDoor(const std::string& event, const std::string& what, const std::string& peer, const std::string& why,
               Code code = Code::kOk);
  // A free-form line ("TS serve: recovered ..."), for what no call caused.
  void Note(const std::string& event, const std::string& text);
  // A move in reaches `phase` ("" when it ended: activated, aborted, refused).
  void SetPhase(const std::string& agent, const std::string& move, uint64_t epoch, const std::string& peer,
                const std::string& phase);
  // The epoch the move in for `agent` was offered at (0 when it is not in flight): a call may
  // come on another connection than its offer.
  uint64_t EpochOf(const std::string& agent, const std::string& move);
  // Writes the state file as it is now (at start, and after every change).
  Status Save();
  // The fleet this sidecar is a member of (--fleet), its name there and its lease, for the
  // state file (capsule sidecar status); called again when the lease changes.
  void SetFleet(const std::string& url, const std::string& name, int64_t lease, int64_t ttl);
  // The sidecar's numbers (move/sidecar_metrics.h), and the registry they are kept in.
  SidecarMetrics& metrics() { return metrics_; }
  const MetricsRegistry& registry() const { return registry_; }

 private:
  Status SaveLocked();  // REQUIRES: mu_ held
  // One line: `text` (after the time and "serve: ") or `fields` as JSON, by the sink.
  void Write(const std::string& event, const std::string& text, Json fields);

  const std::string root_, listen_, started_;
  FILE* const log_;
  const LogSink sink_;
  Mutex mu_;
  std::map<std::string, MoveInFlight> moves_;  // by agent; guarded by mu_
  Json fleet_;  // {"url","name","lease","ttl"} when a member of a fleet; guarded by mu_
  MetricsRegistry registry_;
  SidecarMetrics metrics_;
};

// The calls of one connection, answered by `target` and logged (and tracked) in `state`.
class LoggedTarget : public TargetApi {
 public:
  // `peer` names the connection in the log; `source` (its certificate's common name) is who
  // offers, for the target's limit on moves in flight per source.
  LoggedTarget(TargetApi* target, SidecarState* state, std::string peer, std::string source = "")
      : target_(target), state_(state), peer_(std::move(peer)), source_(std::move(source)) {}

  Result<OfferReply> Offer(const OfferRequest& request) override;
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override;
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override;
  Status Abort(const std::string& agent, const std::string& move) override;

 private:
  TargetApi* target_;
  SidecarState* state_;
  std::string peer_;
  std::string source_;
};

// What `capsule sidecar status --root ROOT` reports.
struct SidecarStatus {
  std::string root, listen, started;
  // With --fleet: the fleet's URL, this sidecar's name there, its lease (hex, as etcdctl
  // shows it) and the lease's TTL in seconds; empty url without.
  std::string fleet_url, fleet_name, fleet_lease;
  int64_t fleet_ttl = 0;
  bool running = false;  // a sidecar holds ROOT/.sidecar.lock (its pid is alive)
  int64_t pid = 0;
  struct Agent {
    std::string agent, state;
    uint64_t epoch = 0;
  };
  std::vector<Agent> agents;          // every ROOT/<agent-id> with a holder record
  std::vector<MoveInFlight> moves;    // in (from the state file; staging areas when stopped) and out
};
Result<SidecarStatus> ReadSidecarStatus(const std::string& root);
Json SidecarStatusToJson(const SidecarStatus& status);

}  // namespace capsule::move
