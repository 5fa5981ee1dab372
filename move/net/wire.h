// The move protocol's bytes on a connection (see WIRE in man/capsule-protocol.7).
//
// Every request and reply is a message: a u32 big-endian length (at most 64 MiB), then a
// JSON object in canonical form. A request is {"call": NAME, ...}; a reply is {"ok": true,
// ...} or {"ok": false, "code": CODE, "error": TEXT}. The copy and switch requests are
// followed by their stream as a body of chunks: a u32 big-endian length (1 to 1 MiB) and
// that many bytes, ended by a length of 0, or cut off by 0xFFFFFFFF when the sender's stream
// failed. Bodies are streamed: neither end holds more than a chunk. A request that carries
// "working_messages": true asks the target to send {"working": true} every kWorkingInterval
// while it works on the call once read whole; the source reads past them (for up to
// kMaxCallWait): a call that is slow (a copy of a million files) is not taken for a dead link.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::move {

inline constexpr uint32_t kMaxMessage = 64u << 20;
inline constexpr uint32_t kMaxChunk = 1u << 20;
inline constexpr uint32_t kChunkAbort = 0xFFFFFFFFu;
// Well inside the 300-second deadline a silent link gets (kLinkTimeoutSeconds).
inline constexpr std::chrono::milliseconds kWorkingInterval = std::chrono::seconds(20);
// How long a source waits for a reply while the target says it is at work: a target stuck at
// a call (not gone) does not hold the source, and a frozen agent, for ever.
inline constexpr std::chrono::milliseconds kMaxCallWait = std::chrono::hours(1);
// How long a source waits for a word of a reply (the reply or a working message) once its
// request is sent: three working intervals. A target that says nothing for so long is gone.
inline constexpr int kReplySilenceSeconds = 60;

// Both directions of one connection. Close ends it (the peer sees the end).
class Connection {
 public:
  virtual ~Connection() = default;
  virtual ByteSource* in() = 0;
  virtual ByteSink* out() = 0;
  virtual void Close() {}
  // Who is at the other end, for messages.
  virtual std::string peer() const { return "peer"; }
  // Seconds a read or write waits for the peer to move a byte before it fails (0: no limit),
  // for a connection that has such a limit; the others ignore it and say 0.
  virtual void set_timeout_seconds(int seconds) { (void)seconds; }
  virtual int timeout_seconds() const { return 0; }
};

Status WriteMessage(ByteSink* out, const Json& message);
// NotFound when the connection ended cleanly before a message began. What it holds grows with
// the bytes that arrive, never to the length the message declares.
Result<Json> ReadMessage(ByteSource* in);

// A message's fields as a peer sent them, read without throwing: the value when `key` is there
// with that type, nullopt otherwise.
std::optional<std::string> StringField(const Json& message, const char* key);
std::optional<uint64_t> U64Field(const Json& message, const char* key);
std::optional<bool> BoolField(const Json& message, const char* key);

// The message a target sends while it works on a call, and whether a message is one.
Json WorkingMessage();
bool IsWorkingMessage(const Json& message);

// A peer's words as they may be printed: every control character (C0, DEL and C1, ESC, CR and
// NUL among them) written as \xHH, the rest kept, cut to 1000 bytes with how long it was, so
// that nothing a peer sends moves a terminal's cursor, forges a line or cuts one short.
std::string PeerWords(std::string_view text);

// A reply for `status`: {"ok": true} or the error with its code.
Json StatusReply(const Status& status);
// The status a reply carries (its code kept), naming the call; the target's words as
// PeerWords prints them.
Status ReplyStatus(const Json& reply);

// Writes a body: each Write becomes chunks, Close the end marker, Abort the cut-off marker.
class ChunkSink : public ByteSink {
 public:
  explicit ChunkSink(ByteSink* out) : out_(out) {}
  Status Write(std::string_view data) override;
  Status Close() override;
  Status Abort();

 private:
  ByteSink* out_;
  std::string frame_;
};

// Reads a body to its end marker; a cut-off marker is Corruption ("the sender's stream
// failed"). Drain reads what is left, so that the next message can be read.
class ChunkSource : public ByteSource {
 public:
  // `at_end`, when given, runs once when the body's end marker (or cut-off) is read.
  explicit ChunkSource(ByteSource* in, std::function<void()> at_end = {}) : in_(in), at_end_(std::move(at_end)) {}
  Result<size_t> Read(char* buffer, size_t size) override;
  Status Drain();
  bool finished() const { return finished_; }

 private:
  void Finish();

  ByteSource* in_;
  std::function<void()> at_end_;
  uint32_t left_ = 0;  // bytes left in the current chunk
  bool finished_ = false;
  Status error_;
};

}  // namespace capsule::move
