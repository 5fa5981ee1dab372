// libFuzzer target: arbitrary bytes as what a move's peer sends on the wire. The first byte
// picks the end:
//   - the target's end: the bytes are requests (and bodies) read by ServeConnection, answered
//     by a target that takes every call; it must end with a Status, never throw or crash;
//   - the source's end: the bytes are the replies RemoteTarget reads, one call after another
//     (offer, copy, switch, activate, query, abort); each must be a Result, never an abort,
//     whatever the reply holds ({"ok":"yes"}, a have that is not one, a cut message...).
// With FUZZ_SEED_DIR set, it first writes real requests and replies there as seeds. Built and
// run by tests/fuzz.sh wire.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "capsule/base/byte_stream.h"
#include "move/remote_target.h"
#include "move/serve.h"

namespace {

using namespace capsule;        // NOLINT
using namespace capsule::move;  // NOLINT

// Reads the fuzz input, writes nowhere.
class FuzzConnection : public Connection {
 public:
  explicit FuzzConnection(std::string input) : in_(std::move(input)) {}
  ByteSource* in() override { return &in_; }
  ByteSink* out() override { return &out_; }

 private:
  StringSource in_;
  StringSink out_;
};

// Takes every call, reading bodies to their end.
class AcceptingTarget : public TargetApi {
 public:
  Result<OfferReply> Offer(const OfferRequest&) override { return OfferReply{{{"files/a", std::string(64, 'a')}}, "00", 1, false}; }
  Result<HaveMap> Copy(const std::string&, const std::string&, ByteSource* stream) override {
    CAPSULE_RETURN_IF_ERROR(Drain(stream));
    return HaveMap{};
  }
  Status Switch(const std::string&, const std::string&, ByteSource* stream) override { return Drain(stream); }
  Status Activate(const std::string&, const std::string&, uint64_t) override { return Status::Ok(); }
  Result<QueryReply> Query(const std::string&, const std::string&) override { return QueryReply{2, "active"}; }
  Status Abort(const std::string&, const std::string&) override { return Status::Ok(); }

 private:
  static Status Drain(ByteSource* stream) {
    char buffer[4096];
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(size_t n, stream->Read(buffer, sizeof buffer));
      if (n == 0) return Status::Ok();
    }
  }
};

// Seeds: real messages on each end, so that mutations start from the wire's form.
void WriteSeeds(const std::string& dir) {
  auto framed = [](const Json& message) {
    StringSink sink;
    if (!WriteMessage(&sink, message).ok()) std::abort();
    return sink.data();
  };
  const std::string move = "0123456789abcdef0123456789abcdef";
  std::string requests = framed(Json{{"call", "offer"}, {"agent", "a"}, {"epoch", 2}, {"move", move}}) +
                         framed(Json{{"call", "copy"}, {"agent", "a"}, {"move", move}}) +
                         std::string("\0\0\0\4body\0\0\0\0", 12) +
                         framed(Json{{"call", "query"}, {"agent", "a"}, {"move", move}});
  std::string replies = framed(Json{{"ok", true}, {"have", Json::object()}, {"held_epoch", 1}, {"seal_key", "00"}}) +
                        framed(Json{{"ok", true}, {"have", {{"files/a", std::string(64, 'a')}}}}) +
                        framed(Json{{"ok", false}, {"code", "Corruption"}, {"error", "bad"}}) +
                        framed(Json{{"ok", true}}) + framed(Json{{"ok", true}, {"epoch", 2}, {"state", "active"}});
  // Fields of the wrong type, which a reader must refuse rather than throw on.
  std::string odd = framed(Json{{"ok", 1}, {"have", Json::array()}, {"epoch", "2"}, {"state", 7}}) +
                    framed(Json{{"ok", "yes"}, {"code", 3}, {"error", Json::object()}});
  std::ofstream(dir + "/seed-requests", std::ios::binary) << '\1' << requests;
  std::ofstream(dir + "/seed-replies", std::ios::binary) << '\0' << replies;
  std::ofstream(dir + "/seed-odd-replies", std::ios::binary) << '\0' << odd;
  std::ofstream(dir + "/seed-odd-requests", std::ios::binary) << '\1' << odd;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) {
    FuzzConnection conn(std::move(input));
    AcceptingTarget target;
    (void)ServeConnection(&conn, &target);
    return 0;
  }
  // One connection whose replies are the input; a call after a failed one dials again and
  // finds the input's end (the connection is gone).
  auto shared = std::make_shared<std::string>(std::move(input));
  bool dialled = false;
  RemoteTarget target("fuzz", [shared, &dialled](int) -> Result<std::unique_ptr<Connection>> {
    if (dialled) return Status::Unavailable("fuzz", "no more connections");
    dialled = true;
    return std::unique_ptr<Connection>(new FuzzConnection(*shared));
  });
  StringSource body("body");
  const std::string agent = "agent-1", move = "0123456789abcdef0123456789abcdef";
  (void)target.Offer({agent, 2, move, ""});
  (void)target.Copy(agent, move, &body);
  (void)target.Switch(agent, move, &body);
  (void)target.Activate(agent, move, 2);
  (void)target.Query(agent, move);
  (void)target.Abort(agent, move);
  return 0;
}
