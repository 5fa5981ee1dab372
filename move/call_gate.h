// The calls a sidecar answers, counted so that a stop lets those in progress finish and lets
// no new one begin: `capsule serve` on SIGTERM closes the gate, waits until no call runs,
// then rolls back the moves that did not activate (move/sidecar.cc). A call refused at a
// closed gate changes nothing: it is Unavailable, "the sidecar is stopping", and the source
// rolls its move back as after any failure before activate (man/capsule-protocol.7).
//
// Thread-safety: CallGate may be used from any thread; a GatedTarget, like the LoggedTarget
// it wraps, by its connection's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>

#include "capsule/base/mutex.h"
#include "move/target_api.h"

namespace capsule::move {

class CallGate {
 public:
  // A call begins: false once the gate is closed (the call must not run).
  bool Enter();
  // A call that Enter let in has ended.
  void Leave();
  // No call begins from now on.
  void Close();
  // Waits until no call runs or `deadline` passes; true when none runs.
  bool WaitIdle(std::chrono::steady_clock::time_point deadline);
  int running();

 private:
  Mutex mu_;
  std::condition_variable idle_;
  bool closed_ GUARDED_BY(mu_) = false;
  int running_ GUARDED_BY(mu_) = 0;
};

// Every call of `target` through `gate`: refused once the gate is closed.
class GatedTarget : public TargetApi {
 public:
  GatedTarget(TargetApi* target, CallGate* gate) : target_(target), gate_(gate) {}

  Result<OfferReply> Offer(const OfferRequest& request) override;
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override;
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override;
  Status Abort(const std::string& agent, const std::string& move) override;

 private:
  TargetApi* target_;
  CallGate* gate_;
};

}  // namespace capsule::move
