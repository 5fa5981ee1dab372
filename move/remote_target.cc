#include "move/remote_target.h"

#include <algorithm>
#include <cstdio>
#include <optional>
#include <vector>

namespace capsule::move {

Status RemoteTarget::Lost(const Status& why) {
  if (conn_) conn_->Close();
  conn_.reset();
  return Status::Unavailable(name_, why.message());
}

namespace {

// A have sent after its reply as a body (a million files' is a hundred megabytes).
Result<std::string> ReadHaveBody(ByteSource* in) {
  constexpr size_t kMaxHave = size_t{1} << 30;
  ChunkSource chunks(in);
  std::string text;
  std::vector<char> buffer(kMaxChunk);
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, chunks.Read(buffer.data(), buffer.size()));
    if (n == 0) return text;
    if (text.size() + n > kMaxHave) return Status::Corruption("have", "larger than 1 GiB");
    text.append(buffer.data(), n);
  }
}

}  // namespace

Result<Json> RemoteTarget::Call(const Json& request, ByteSource* body, HaveMap* have,
                                 std::optional<std::chrono::seconds> limit) {
  if (conn_ && std::chrono::steady_clock::now() - last_used_ > max_idle_) {
    conn_->Close();  // the far end may have given up on it: a fresh one costs a handshake
    conn_.reset();
  }
  if (!conn_) {
    Result<std::unique_ptr<Connection>> dialed = dial_(limit ? static_cast<int>(limit->count()) : 0);
    if (!dialed.ok()) {
      if (dialed.status().code() == Code::kPermissionDenied) return dialed.status();
      return Status::Unavailable(name_, dialed.status().message());
    }
    conn_ = std::move(*dialed);
  }
  Json asking = request;
  asking["working_messages"] = true;  // a slow call is then told from a dead link
  asking["have_body"] = true;         // a have of any size then crosses
  if (Status sent = WriteMessage(conn_->out(), asking); !sent.ok()) return Lost(sent);
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
  // The request is sent: a target at work says so every kWorkingInterval, so one silent for
  // longer than kReplySilenceSeconds (or the call's limit) is gone. Only ever shortened.
  const int link_timeout = conn_->timeout_seconds();
  int reply_timeout = limit ? static_cast<int>(limit->count()) : kReplySilenceSeconds;
  if (link_timeout > 0) reply_timeout = std::min(reply_timeout, link_timeout);
  conn_->set_timeout_seconds(reply_timeout);
  const std::chrono::milliseconds max_wait =
      limit ? std::min<std::chrono::milliseconds>(*limit, max_call_wait_) : max_call_wait_;
  const auto waiting_since = std::chrono::steady_clock::now();
  Result<Json> reply = ReadMessage(conn_->in());
  while (reply.ok() && IsWorkingMessage(*reply)) {  // the target is at work
    if (std::chrono::steady_clock::now() - waiting_since > max_wait) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%g", static_cast<double>(max_wait.count()) / 1000);
      return Lost(Status::Unavailable(name_, std::string("no reply after ") + waited +
                                                 " s of the target saying it is at work"));
    }
    reply = ReadMessage(conn_->in());
  }
  if (!reply.ok()) return Lost(reply.status());
  conn_->set_timeout_seconds(link_timeout);
  std::optional<std::string> have_text;
  if (BoolField(*reply, "have_body").value_or(false)) {
    Result<std::string> text = ReadHaveBody(conn_->in());
    if (!text.ok()) return Lost(text.status());
    have_text = std::move(*text);
  }
  last_used_ = std::chrono::steady_clock::now();
  if (!body_failed.ok()) return body_failed;
  CAPSULE_RETURN_IF_ERROR(ReplyStatus(*reply).WithContext(name_));
  if (have != nullptr) {
    CAPSULE_ASSIGN_OR_RETURN(*have, have_text ? ParseHave(*have_text, Code::kCorruption)
                                              : HaveFromJson(reply->value("have", Json::object()), Code::kCorruption));
  }
  return reply;
}

Result<OfferReply> RemoteTarget::Offer(const OfferRequest& request) {
  OfferReply offer;
  CAPSULE_ASSIGN_OR_RETURN(Json reply, Call(Json{{"call", "offer"}, {"agent", request.agent}, {"epoch", request.epoch},
                                                 {"move", request.move}},
                                            nullptr, &offer.have));
  offer.seal_key_hex = StringField(reply, "seal_key").value_or("");
  offer.held_epoch = U64Field(reply, "held_epoch").value_or(0);
  offer.journal_append = BoolField(reply, "journal_append").value_or(false);
  return offer;
}

Result<HaveMap> RemoteTarget::Copy(const std::string& agent, const std::string& move, ByteSource* stream) {
  HaveMap have;
  CAPSULE_RETURN_IF_ERROR(Call(Json{{"call", "copy"}, {"agent", agent}, {"move", move}}, stream, &have).status());
  return have;
}

Status RemoteTarget::Switch(const std::string& agent, const std::string& move, ByteSource* stream) {
  return Call(Json{{"call", "switch"}, {"agent", agent}, {"move", move}}, stream).status();
}

Status RemoteTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  return Call(Json{{"call", "activate"}, {"agent", agent}, {"move", move}, {"epoch", epoch}}).status();
}

Result<QueryReply> RemoteTarget::Query(const std::string& agent, const std::string& move) {
  CAPSULE_ASSIGN_OR_RETURN(Json reply,
                           Call(Json{{"call", "query"}, {"agent", agent}, {"move", move}}, nullptr, nullptr, query_timeout_));
  std::optional<uint64_t> epoch = U64Field(reply, "epoch");
  std::optional<std::string> state = StringField(reply, "state");
  // A reply without them says nothing of what the target holds: no answer, never "none".
  if (!epoch || !state) return Status::Corruption(name_, "a query reply without its epoch and state");
  return QueryReply{*epoch, *state};
}

Status RemoteTarget::Abort(const std::string& agent, const std::string& move) {
  return Call(Json{{"call", "abort"}, {"agent", agent}, {"move", move}}).status();
}

}  // namespace capsule::move
