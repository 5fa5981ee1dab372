// The target of a move as a source in a fleet sees it: the sidecar's calls (any TargetApi),
// with the registry as the second witness. When activate's reply is lost and the target
// cannot be asked which epoch it holds, the holder of record answers: the move landed when
// it names the target at the new epoch; otherwise the move is fenced in etcd first, so that
// it never lands, and the answer is that it did not (fleet::ResolveByRecord). No guess
// either way; while neither the target nor etcd can answer, the query fails and the agent
// stays frozen, as without a fleet.
//
// Thread-safety: as the target it wraps; one move at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "move/fleet/etcd_client.h"
#include "move/target_api.h"

namespace capsule::move {

class FleetTarget : public TargetApi {
 public:
  // `name`: the target sidecar's name in the registry.
  FleetTarget(TargetApi* target, std::shared_ptr<fleet::EtcdClient> etcd, std::string name)
      : target_(target), etcd_(std::move(etcd)), name_(std::move(name)) {}

  Result<OfferReply> Offer(const OfferRequest& request) override;
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override {
    return target_->Copy(agent, move, stream);
  }
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override {
    return target_->Switch(agent, move, stream);
  }
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override;
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override;
  Status Abort(const std::string& agent, const std::string& move) override { return target_->Abort(agent, move); }
  // The move's new epoch when no offer is made through this (capsule move --recover).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }

 private:
  TargetApi* target_;
  std::shared_ptr<fleet::EtcdClient> etcd_;
  std::string name_;
  uint64_t epoch_ = 0;  // the epoch of the move in progress, from its offer
};

}  // namespace capsule::move
