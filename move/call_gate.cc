#include "move/call_gate.h"

namespace capsule::move {

namespace {

Status Stopping(const char* call) {
  return Status::Unavailable(call, "the sidecar is stopping: nothing was done, and its moves that did not activate "
                                   "are rolled back");
}

// Runs `body` between Enter and Leave, or answers Stopping when the gate is closed.
template <typename Body>
auto Through(CallGate* gate, const char* call, Body body) -> decltype(body()) {
  if (!gate->Enter()) return Stopping(call);
  struct Leave {
    CallGate* gate;
    ~Leave() { gate->Leave(); }
  } leave{gate};
  return body();
}

}  // namespace

bool CallGate::Enter() {
  std::lock_guard lock(mu_);
  if (closed_) return false;
  ++running_;
  return true;
}

void CallGate::Leave() {
  std::lock_guard lock(mu_);
  if (--running_ == 0) idle_.notify_all();
}

void CallGate::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
}

bool CallGate::WaitIdle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return idle_.wait_until(lock, deadline, [this]() REQUIRES(mu_) { return running_ == 0; });
}

int CallGate::running() {
  std::lock_guard lock(mu_);
  return running_;
}

Result<OfferReply> GatedTarget::Offer(const OfferRequest& request) {
  return Through(gate_, "offer", [&] { return target_->Offer(request); });
}

Result<HaveMap> GatedTarget::Copy(const std::string& agent, const std::string& move, ByteSource* stream) {
  return Through(gate_, "copy", [&] { return target_->Copy(agent, move, stream); });
}

Status GatedTarget::Switch(const std::string& agent, const std::string& move, ByteSource* stream) {
  return Through(gate_, "switch", [&] { return target_->Switch(agent, move, stream); });
}

Status GatedTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  return Through(gate_, "activate", [&] { return target_->Activate(agent, move, epoch); });
}

Result<QueryReply> GatedTarget::Query(const std::string& agent, const std::string& move) {
  return Through(gate_, "query", [&] { return target_->Query(agent, move); });
}

Status GatedTarget::Abort(const std::string& agent, const std::string& move) {
  return Through(gate_, "abort", [&] { return target_->Abort(agent, move); });
}

}  // namespace capsule::move
