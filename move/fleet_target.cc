#include "move/fleet_target.h"

#include "move/fleet/registry.h"

namespace capsule::move {

Result<OfferReply> FleetTarget::Offer(const OfferRequest& request) {
  epoch_ = request.epoch;
  return target_->Offer(request);
}

Status FleetTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  epoch_ = epoch;
  return target_->Activate(agent, move, epoch);
}

Result<QueryReply> FleetTarget::Query(const std::string& agent, const std::string& move) {
  Result<QueryReply> asked = target_->Query(agent, move);
  if (asked.ok() || epoch_ == 0) return asked;
  Result<bool> landed = fleet::ResolveByRecord(*etcd_, agent, move, name_, epoch_);
  if (!landed.ok()) {
    return Status::Unavailable("query of move " + move, asked.status().message() +
                                                            "; and the fleet's registry cannot say either (" +
                                                            landed.status().message() + ")");
  }
  QueryReply reply;
  if (*landed) {
    reply.epoch = epoch_;
    reply.state = "active";
  } else {
    reply.state = "none";  // fenced: the move never lands
  }
  return reply;
}

}  // namespace capsule::move
