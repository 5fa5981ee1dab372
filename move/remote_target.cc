#include "move/remote_target.h"

#include <vector>

namespace capsule::move {

namespace {

Result<HaveMap> HaveFromJson(const Json& json) {
  if (!json.is_object()) return Status::Corruption("have", "not a JSON object");
  HaveMap have;
  for (const auto& [path, sha] : json.items()) {
    if (!sha.is_string()) return Status::Corruption("have", "digest of " + path + " is not a string");
    have[path] = sha.get<std::string>();
  }
  return have;
}

Json HaveToJsonObject(const HaveMap& have) {
  Json json = Json::object();
  for (const auto& [path, sha] : have) json[path] = sha;
  return json;
}

std::string Str(const Json& json, const char* key) {
  auto it = json.find(key);
  return it != json.end() && it->is_string() ? it->get<std::string>() : "";
}

uint64_t U64(const Json& json, const char* key) {
  auto it = json.find(key);
  return it != json.end() && it->is_number_unsigned() ? it->get<uint64_t>() : 0;
}

}  // namespace

Status RemoteTarget::Lost(const Status& why) {
  if (conn_) conn_->Close();
  conn_.reset();
  return Status::Unavailable(name_, why.message());
}

Result<Json> RemoteTarget::Call(const Json& request, ByteSource* body) {
  if (conn_ && std::chrono::steady_clock::now() - last_used_ > max_idle_) {
    conn_->Close();  // the far end may have given up on it: a fresh one costs a handshake
    conn_.reset();
  }
  if (!conn_) {
    Result<std::unique_ptr<Connection>> dialed = dial_();
    if (!dialed.ok()) {
      if (dialed.status().code() == Code::kPermissionDenied) return dialed.status();
      return Status::Unavailable(name_, dialed.status().message());
    }
    conn_ = std::move(*dialed);
  }
  if (Status sent = WriteMessage(conn_->out(), request); !sent.ok()) return Lost(sent);
  Status body_failed;
  if (body != nullptr) {
    ChunkSink chunks(conn_->out());
    std::vector<char> buffer(kMaxChunk);
    for (;;) {
      Result<size_t> n = body->Read(buffer.data(), buffer.size());
      if (!n.ok()) {
        body_failed = n.status();
        if (Status cut = chunks.Abort(); !cut.ok()) return Lost(cut);
        break;
      }
      if (*n == 0) {
        if (Status ended = chunks.Close(); !ended.ok()) return Lost(ended);
        break;
      }
      if (Status sent = chunks.Write(std::string_view(buffer.data(), *n)); !sent.ok()) return Lost(sent);
    }
  }
  Result<Json> reply = ReadMessage(conn_->in());
  if (!reply.ok()) return Lost(reply.status());
  last_used_ = std::chrono::steady_clock::now();
  if (!body_failed.ok()) return body_failed;
  CAPSULE_RETURN_IF_ERROR(ReplyStatus(*reply).WithContext(name_));
  return reply;
}

Result<OfferReply> RemoteTarget::Offer(const OfferRequest& request) {
  CAPSULE_ASSIGN_OR_RETURN(Json reply, Call(Json{{"call", "offer"}, {"agent", request.agent}, {"epoch", request.epoch},
                                                 {"move", request.move}}));
  OfferReply offer;
  CAPSULE_ASSIGN_OR_RETURN(offer.have, HaveFromJson(reply.value("have", Json::object())));
  offer.seal_key_hex = Str(reply, "seal_key");
  offer.held_epoch = U64(reply, "held_epoch");
  return offer;
}

Result<HaveMap> RemoteTarget::Copy(const std::string& agent, const std::string& move, ByteSource* stream) {
  CAPSULE_ASSIGN_OR_RETURN(Json reply, Call(Json{{"call", "copy"}, {"agent", agent}, {"move", move}}, stream));
  return HaveFromJson(reply.value("have", Json::object()));
}

Status RemoteTarget::Switch(const std::string& agent, const std::string& move, ByteSource* stream) {
  return Call(Json{{"call", "switch"}, {"agent", agent}, {"move", move}}, stream).status();
}

Status RemoteTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  return Call(Json{{"call", "activate"}, {"agent", agent}, {"move", move}, {"epoch", epoch}}).status();
}

Result<QueryReply> RemoteTarget::Query(const std::string& agent, const std::string& move) {
  CAPSULE_ASSIGN_OR_RETURN(Json reply, Call(Json{{"call", "query"}, {"agent", agent}, {"move", move}}));
  QueryReply query;
  query.epoch = U64(reply, "epoch");
  query.state = Str(reply, "state");
  return query;
}

Status RemoteTarget::Abort(const std::string& agent, const std::string& move) {
  return Call(Json{{"call", "abort"}, {"agent", agent}, {"move", move}}).status();
}

Status ServeConnection(Connection* conn, TargetApi* target) {
  for (;;) {
    Result<Json> request = ReadMessage(conn->in());
    if (!request.ok()) return request.status().code() == Code::kNotFound ? Status::Ok() : request.status();
    std::string call = Str(*request, "call"), agent = Str(*request, "agent"), move = Str(*request, "move");
    uint64_t epoch = U64(*request, "epoch");
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
