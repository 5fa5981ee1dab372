#include "move/serve.h"

#include <string>

namespace capsule::move {

Status ServeConnection(Connection* conn, TargetApi* target) {
  for (;;) {
    Result<Json> request = ReadMessage(conn->in());
    if (!request.ok()) return request.status().code() == Code::kNotFound ? Status::Ok() : request.status();
    std::string call = StringField(*request, "call").value_or("");
    std::string agent = StringField(*request, "agent").value_or("");
    std::string move = StringField(*request, "move").value_or("");
    uint64_t epoch = U64Field(*request, "epoch").value_or(0);
    Json reply;
    if (call == "copy" || call == "switch") {
      ChunkSource body(conn->in());
      Status done;
      if (call == "copy") {
        Result<HaveMap> have = target->Copy(agent, move, &body);
        done = have.status();
        if (have.ok()) {
          reply = StatusReply(done);
          reply["have"] = HaveToJsonObject(*have);
        }
      } else {
        done = target->Switch(agent, move, &body);
      }
      if (!body.finished()) CAPSULE_RETURN_IF_ERROR(body.Drain());
      if (!done.ok() || call == "switch") reply = StatusReply(done);
    } else if (call == "offer") {
      Result<OfferReply> offer = target->Offer(OfferRequest{agent, epoch, move});
      reply = StatusReply(offer.status());
      if (offer.ok()) {
        reply["have"] = HaveToJsonObject(offer->have);
        reply["seal_key"] = offer->seal_key_hex;
        reply["held_epoch"] = offer->held_epoch;
      }
    } else if (call == "activate") {
      reply = StatusReply(target->Activate(agent, move, epoch));
    } else if (call == "query") {
      Result<QueryReply> query = target->Query(agent, move);
      reply = StatusReply(query.status());
      if (query.ok()) {
        reply["epoch"] = query->epoch;
        reply["state"] = query->state;
      }
    } else if (call == "abort") {
      reply = StatusReply(target->Abort(agent, move));
    } else {
      reply = StatusReply(Status::InvalidArgument("call '" + call + "'", "not a call of the move protocol"));
    }
    CAPSULE_RETURN_IF_ERROR(WriteMessage(conn->out(), reply));
  }
}

}  // namespace capsule::move
