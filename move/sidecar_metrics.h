// The sidecar's numbers, served by `capsule serve --metrics HOST:PORT` in Prometheus's text
// format (capsule/base/metrics.h; their list in man capsule.1, METRICS). They are counted where
// the sidecar logs its events (move/sidecar_state.h), so each log line and its number agree:
// accepted offer: a move started; activated: finished; aborted or expired: rolled back; refused
// (a call, a connection, a handshake): a refusal by call and reason.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/metrics.h"
#include "capsule/base/status.h"

namespace capsule::move {

class SidecarMetrics {
 public:
  // Registers every metric in `registry`; the gauges read at each scrape look at `root`
  // (agents held, bytes staged) and call `moves_in_flight`.
  SidecarMetrics(MetricsRegistry* registry, const std::string& root, std::function<size_t()> moves_in_flight);

  // What a log line of the sidecar's says happened (SidecarState::Log's event and call).
  void Event(const std::string& event, const std::string& call, const std::string& agent, const std::string& move);
  // A refusal: `call` is the call refused (offer, copy, switch, activate, query, abort) or
  // connection or handshake; `code` why, as a label ("failed_precondition").
  void Refused(const std::string& call, Code code);
  // A move out left mid-way by an earlier run that cannot be resolved yet (its agent frozen):
  // +1 when its resolution begins, -1 once resolved.
  Gauge& moves_stuck() { return moves_stuck_; }
  Gauge& handshakes() { return handshakes_; }
  Counter& bytes_received() { return bytes_received_; }
  Histogram& copy_seconds() { return copy_seconds_; }

 private:
  MetricsRegistry* const registry_;
  Counter& started_;
  Counter& finished_;
  Counter& rolled_back_;
  Gauge& moves_stuck_;
  Gauge& handshakes_;
  Counter& bytes_received_;
  Histogram& copy_seconds_;
  Histogram& frozen_seconds_;
  std::mutex mu_;
  // When each move's switch began (the source froze its agent for it), by agent and move.
  std::map<std::string, std::chrono::steady_clock::time_point> frozen_since_;  // guarded by mu_
};

// A stream read through, each byte counted on `counter`.
class CountingSource : public ByteSource {
 public:
  CountingSource(ByteSource* source, Counter* counter) : source_(source), counter_(counter) {}
  Result<size_t> Read(char* buffer, size_t size) override {
    Result<size_t> n = source_->Read(buffer, size);
    if (n.ok()) counter_->Add(*n);
    return n;
  }

 private:
  ByteSource* source_;
  Counter* counter_;
};

}  // namespace capsule::move
