#include "capsule/base/mutex.h"
#include "move/serve.h"

#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "capsule/base/memory.h"

namespace capsule::move {

namespace {

// Tells the source that the target is still at work on its call: a working message every
// interval from Start until Stop, which joins, so that the reply written after it is the
// link's only writer again. Started only once the call's bytes are all read: the link is
// then written by this thread alone.
class WorkingTicker {
 public:
  WorkingTicker(ByteSink* out, std::chrono::milliseconds interval) : out_(out), interval_(interval) {}
  WorkingTicker(const WorkingTicker&) = delete;
  WorkingTicker& operator=(const WorkingTicker&) = delete;
  ~WorkingTicker() { Stop(); }

  void Start() {
    if (thread_.joinable()) return;
    thread_ = std::thread([this] {
      std::unique_lock lock(mu_);
      while (!cv_.wait_for(lock, interval_, [this]() REQUIRES(mu_) { return stopping_; })) {
        lock.unlock();
        const bool sent = WriteMessage(out_, WorkingMessage()).ok();
        lock.lock();
        if (!sent) return;  // the link is gone: the reply's write says so
      }
    });
  }

  void Stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  ByteSink* out_;
  const std::chrono::milliseconds interval_;
  Mutex mu_;
  std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// The have as its canonical text, in chunks.
Status WriteHaveBody(ByteSink* out, const HaveMap& have) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, HaveToJson(have));
  ChunkSink chunks(out);
  CAPSULE_RETURN_IF_ERROR(chunks.Write(text));
  return chunks.Close();
}

}  // namespace

Status ServeConnection(Connection* conn, TargetApi* target, std::chrono::milliseconds working_interval) {
  for (;;) {
    Result<Json> request = ReadMessage(conn->in());
    if (!request.ok()) return request.status().code() == Code::kNotFound ? Status::Ok() : request.status();
    std::string call = StringField(*request, "call").value_or("");
    std::string agent = StringField(*request, "agent").value_or("");
    std::string move = StringField(*request, "move").value_or("");
    uint64_t epoch = U64Field(*request, "epoch").value_or(0);
    // When the source asks for working messages (an older one would take them for a reply):
    // a call without a body is read whole already (activate installs a staging area, abort
    // removes one: minutes for a million files); a body's end starts the ticker.
    WorkingTicker working(conn->out(), working_interval);
    const bool tick = BoolField(*request, "working_messages").value_or(false);
    // A have goes after the reply as a body when the source asks: a million files' have is
    // larger than a message may be.
    const bool have_as_body = BoolField(*request, "have_body").value_or(false);
    std::optional<HaveMap> have_body;
    auto put_have = [&](Json* reply, HaveMap have) {
      if (have_as_body) {
        (*reply)["have_body"] = true;
        have_body = std::move(have);
      } else {
        (*reply)["have"] = HaveToJsonObject(have);
      }
    };
    const bool has_body = call == "copy" || call == "switch";
    if (tick && !has_body) working.Start();
    Json reply;
    if (has_body) {
      ChunkSource body(conn->in(), [&working, tick] {
        if (tick) working.Start();
      });
      Status done;
      if (call == "copy") {
        Result<HaveMap> have = target->Copy(agent, move, &body);
        done = have.status();
        if (have.ok()) {
          reply = StatusReply(done);
          put_have(&reply, std::move(*have));
        }
      } else {
        done = target->Switch(agent, move, &body);
      }
      if (!body.finished()) CAPSULE_RETURN_IF_ERROR(body.Drain());
      if (!done.ok() || call == "switch") reply = StatusReply(done);
    } else if (call == "offer") {
      Result<OfferReply> offer = target->Offer(OfferRequest{agent, epoch, move, ""});
      reply = StatusReply(offer.status());
      if (offer.ok()) {
        put_have(&reply, std::move(offer->have));
        reply["seal_key"] = offer->seal_key_hex;
        reply["held_epoch"] = offer->held_epoch;
        reply["journal_append"] = offer->journal_append;
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
    working.Stop();
    CAPSULE_RETURN_IF_ERROR(WriteMessage(conn->out(), reply));
    if (have_body) CAPSULE_RETURN_IF_ERROR(WriteHaveBody(conn->out(), *have_body));
    // A copy's staging, once answered; a switch's at the next call (its activate follows while
    // the agent is frozen, and the trim takes 0.1 s at 200,000 files).
    if (call != "switch") ReturnFreedMemory();
  }
}

}  // namespace capsule::move
