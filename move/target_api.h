// The calls of a move, as the source makes them to the target (see man/capsule-protocol.7 and
// shared/spec/move.md). Three implementations: MoveTarget (the target itself, over a root
// folder), RemoteTarget (the same calls over a connection to a sidecar) and, in tests,
// FaultyTarget (loses one named call's request or reply).
//
//   offer(agent, epoch, move)  -> the target's have and its sealing key; refused unless
//                                 epoch is newer than every epoch the target knows for agent
//   copy(agent, move, stream)  -> the target applies the copy to its staging area; its have after
//   switch(agent, move, sealed stream) -> applied, verified, prepared; still staged
//   activate(agent, move, epoch)       -> the point of no return: staged becomes held
//   query(agent, move)         -> the epoch the target holds; a move not activated by then
//                                 never will be (its staging is emptied)
//   abort(agent, move)         -> the staging area is emptied
#pragma once

#include <cstdint>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/status.h"
#include "move/stream/format.h"

namespace capsule::move {

struct OfferRequest {
  std::string agent;
  uint64_t epoch = 0;  // the source's epoch + 1
  std::string move;    // 32 hex digits, the same in every call of the move
  // Who offers, for the target's limit on moves in flight per source: the common name of the
  // peer's certificate, filled in by the sidecar (never on the wire; "" counts as one source).
  std::string source;
};

struct OfferReply {
  HaveMap have;              // what the target already holds of the agent (its retired copy)
  std::string seal_key_hex;  // X25519 public key the switch is sealed to
  uint64_t held_epoch = 0;   // the newest epoch the target knew for the agent
  // Whether the target takes a switch's journal as the events appended since the copy
  // (LNK.append.*, capsule-move(5)); a source sends a target without it the journal whole.
  bool journal_append = false;
};

struct QueryReply {
  uint64_t epoch = 0;     // the epoch of the target's holder record, 0 when it has none
  std::string state;      // "active", "frozen", "retired" or "none"
};

// The names of the calls, as FaultyTarget and the wire name them.
inline constexpr const char* kCallNames[] = {"offer", "copy", "switch", "activate", "query", "abort"};

class TargetApi {
 public:
  virtual ~TargetApi() = default;
  virtual Result<OfferReply> Offer(const OfferRequest& request) = 0;
  // Reads the copy stream from `stream` to its end. Returns the target's have afterwards.
  virtual Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) = 0;
  // Reads the sealed switch stream from `stream` to its end.
  virtual Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) = 0;
  virtual Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) = 0;
  virtual Result<QueryReply> Query(const std::string& agent, const std::string& move) = 0;
  virtual Status Abort(const std::string& agent, const std::string& move) = 0;
};

}  // namespace capsule::move
