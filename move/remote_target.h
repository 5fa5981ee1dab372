// The calls of target_api.h over a connection (move/net/wire.h), as the source makes them.
// move/serve.h answers them for a sidecar.
#pragma once

#include <chrono>

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "move/net/wire.h"
#include "move/target_api.h"

namespace capsule::move {

// Opens a new connection to the target (TLS in the CLI, a socketpair in tests), within
// `timeout_seconds` (0: the dialer's own limit).
using Dialer = std::function<Result<std::unique_ptr<Connection>>(int timeout_seconds)>;

// One connection at a time, dialed on first use and again after any failure, so that a query
// after a cut link reaches the target if it can be reached at all, and again when it has been
// idle longer than `max_idle` (the source may be busy between calls, e.g. while its mount
// hashes its blobs before a freeze, and a sidecar hangs up on a silent link after 300 s; the
// target keeps a move's state by agent and move id, not by connection). Every transport
// failure is Unavailable naming the target: the caller cannot tell whether the call ran.
class RemoteTarget : public TargetApi {
 public:
  RemoteTarget(std::string name, Dialer dial) : name_(std::move(name)), dial_(std::move(dial)) {}

  // A connection unused for longer than this is closed and dialled again before the next call.
  void set_max_idle(std::chrono::milliseconds max_idle) { max_idle_ = max_idle; }
  // How long a call waits for its reply while the target sends working messages.
  void set_max_call_wait(std::chrono::milliseconds wait) { max_call_wait_ = wait; }
  // How long one query may take: to connect, when it must, and then to be answered (working
  // messages or not). A query asks what the target holds after activate's reply was lost;
  // the source asks again rather than wait long on one (man capsule-protocol.7, Failures).
  void set_query_timeout(std::chrono::seconds timeout) { query_timeout_ = timeout; }

  Result<OfferReply> Offer(const OfferRequest& request) override;
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override;
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override;
  Status Abort(const std::string& agent, const std::string& move) override;

 private:
  // Sends `request` (and `body`, when given, as chunks) and reads the reply; with `have`, the
  // have the reply carries (in the message or as a body after it) into *have.
  // `limit`, when given, bounds the dial and the wait for the reply, working messages or not.
  Result<Json> Call(const Json& request, ByteSource* body = nullptr, HaveMap* have = nullptr,
                    std::optional<std::chrono::seconds> limit = std::nullopt);
  Status Lost(const Status& why);

  std::string name_;
  Dialer dial_;
  std::unique_ptr<Connection> conn_;
  std::chrono::steady_clock::time_point last_used_;
  std::chrono::milliseconds max_idle_ = std::chrono::seconds(60);
  std::chrono::milliseconds max_call_wait_ = kMaxCallWait;
  std::chrono::seconds query_timeout_{10};
};

}  // namespace capsule::move
