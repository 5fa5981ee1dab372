// Writing a capsule as a Move Stream (format 4), in constant memory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/progress.h"
#include "capsule/base/status.h"
#include "move/stream/format.h"
#include "move/stream/plan.h"

namespace capsule::move {

struct PackOptions {
  Phase phase = Phase::kCopy;
  // The move id; a new one is made when absent. A switch must carry its copy's id.
  std::optional<std::string> move_id;
  // What the receiver holds: each file it holds the same is skipped.
  HaveMap have;
  // The epoch the stream offers; the capsule's current epoch when absent.
  std::optional<uint64_t> epoch;
  // Phase named after the stream's (copy, switch, files): the file bytes and files sent, of
  // those the receiver does not hold.
  Progress* progress = nullptr;
  // Whether each blob sent is hashed as it is read, so that a pack of a blob changed in
  // place fails here and its stream gets no end. A move turns it off: its target hashes every
  // file it writes and refuses the stream at the first that differs (capsule-protocol(7)),
  // so the check here only came earlier, at the price of a second SHA-256 of every byte sent
  // on the same machine's cores. Files sent from elsewhere (the journal, memory/), which may
  // change while they are sent, are hashed either way.
  bool hash_blobs = true;
  // A switch: the journal as the receiver holds it, when known (what the copy sent of it, the
  // receiver's have naming the same digest). When the journal still begins with it, only what
  // follows is sent (LNK.append.*), so that the agent's history is not sent twice.
  std::optional<HeldJournal> held_journal;
};

struct PackStats {
  std::string move_id;
  uint64_t files_sent = 0;
  uint64_t files_skipped = 0;  // held the same by the receiver
  uint64_t file_bytes_sent = 0;
  uint64_t removed = 0;
  // The journal this stream holds or skipped as held, whole (size 0 and no digest when it was
  // sent as what follows what the receiver holds).
  HeldJournal journal;
};

// Refuses a capsule whose environment spec carries a secret value (CheckEnvironmentSpec): a
// secret never leaves in a stream. PackCapsule checks it for a copy or a switch; a move checks
// it before it offers anything.
Status CheckSpecHoldsNoSecret(const std::string& dir);

// Writes the stream of the capsule at `dir` into `sink`, then closes the sink.
Status PackCapsule(const std::string& dir, const PackOptions& options, ByteSink* sink, PackStats* stats);

}  // namespace capsule::move
