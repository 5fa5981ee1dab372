// The source of a move: drives the calls of target_api.h, keeping the invariant that at most
// one machine runs the agent.
//
//   offer(epoch+1) -> copy (the agent keeps running) -> freeze -> switch (sealed)
//   -> record "activate sent" -> activate -> retire
//
// Before "activate sent" any failure rolls back: abort to the target, thaw here. After it
// the source never guesses: it asks the target which epoch it holds (query) and retires when
// it is the new one, thaws when it is anything else, and stays frozen while there is no
// answer. The move in progress is recorded in DIR/.capsule/move-out.json, so a source that
// restarts (RecoverMove) resolves it the same way.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "capsule/base/progress.h"
#include "capsule/base/status.h"
#include "move/target_api.h"

namespace capsule::move {

struct MoveOptions {
  std::string to;  // the target's address, recorded so that a restart can ask it
  // Each phase as it begins: "copy" and "switch" count the file bytes and files they send, of
  // those the target lacks; "preverify", "freeze" and "activate" only their time.
  Progress* progress = nullptr;
  // After activate's reply is lost: how often to ask the target, and how long between (each
  // query's own time is the target's: RemoteTarget::set_query_timeout, 10 s by default).
  int query_attempts = 20;
  std::chrono::milliseconds query_interval{500};
  // Told, before each query, what the source is waiting for (the agent stays frozen meanwhile),
  // for the operator: "move M: activate's reply was lost (...); asking HOST which epoch it
  // holds, try 2 of 20 (...); the agent stays frozen here until it answers".
  std::function<void(const std::string&)> on_wait;
  // Tests only: stop dead (no rollback, as a crash would) right after this step:
  // "offered", "copied", "frozen", "switched", "activate-sent", "activated".
  std::string crash_after;
};

struct MoveReport {
  std::string move;
  std::string agent;
  uint64_t epoch = 0;  // the new epoch, held by the target
  uint64_t copy_bytes = 0, copy_files = 0, copy_skipped = 0;
  uint64_t switch_bytes = 0, switch_files = 0, switch_file_bytes = 0, removed = 0;
  double copy_seconds = 0;
  double preverify_seconds = 0;  // a mount hashing its blobs after the copy, still running
  double freeze_seconds = 0;  // the freeze call alone (a mount commits and verifies)
  double frozen_seconds = 0;  // from freeze to the target's answer to activate
};

// The error of a test's simulated crash (MoveOptions::crash_after).
bool IsSimulatedCrash(const Status& status);

// Moves the agent at `source` (a capsule folder or a mountpoint) to `target`, holding
// .capsule/move-out.lock for the whole move: a second move of the agent meanwhile, or a
// RecoverMove, is refused and says a move is running, with its pid. Ok only when
// the target holds the new epoch and the source is retired. A refused or failed move before
// the point of no return leaves the source active at its old epoch. Unavailable when the
// target could not say whether it activated: the source stays frozen, and RecoverMove
// resolves it later. A move left unresolved by a process that died is refused until
// RecoverMove resolves it.
Result<MoveReport> RunMove(const std::string& source, TargetApi* target, const MoveOptions& options);

// What a move left recorded at `source`, if any: its target address and its phase.
struct OutgoingMove {
  std::string agent, move, to, phase;  // phase: "offered", "frozen", "activate-sent"
  uint64_t epoch = 0;
};
Result<std::optional<OutgoingMove>> LoadOutgoingMove(const std::string& capsule_dir);

// Resolves the move recorded at `source`, never by guessing: before "activate sent", abort
// and thaw; after it, query the target and retire or thaw by its answer. Unavailable (the
// source stays frozen) while the target cannot answer. Ok when nothing was recorded.
Status RecoverMove(const std::string& source, TargetApi* target, const MoveOptions& options);

}  // namespace capsule::move
