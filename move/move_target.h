// The target of a move: the sidecar's side of the calls in target_api.h, over a root folder.
//
//   ROOT/<agent-id>/           a capsule this machine holds, or held (a retired copy)
//   ROOT/.staging/<agent-id>/  the capsule being built by the move in progress for that agent
//
// The holder record of each capsule stays its .capsule/holder.json. A staging area is a
// whole capsule folder: a clone of the retired copy (blobs hard-linked) when there is one, to
// which the copy and then the switch are applied. Activate writes the new holder record
// (epoch, active) inside the staging area, then puts it in the capsule's place with one
// rename (or an exchange, the old copy then being removed). Hence, after a crash, whatever
// lies under ROOT/.staging/ is either a move that never activated or the old copy an
// activation replaced: Open() removes it all, and the holder record of ROOT/<agent-id>
// alone says which epoch this machine holds. No guessing, no timeout.
//
// While it runs, a move whose source falls silent ends too: DropSilent rolls back each move in
// flight no call has been made for within StagingLimits::silence, and an offer past a
// source's StagingLimits::max_moves_per_source is refused, so that offers left behind hold
// staging areas for a bounded time, in a bounded number.
//
// Thread-safety: every call takes the agent's lock; calls for different agents run at once.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "capsule/base/mutex.h"
#include "capsule/base/openssl_handles.h"
#include "journal/check.h"
#include "journal/event.h"
#include "journal/render/render.h"
#include "move/stream/unpack.h"
#include "move/target_api.h"

namespace capsule::move {

// How long a move in flight may go without a word from its source, and how many one source
// may have in flight at once (capsule serve --staging-timeout, --max-moves-per-source).
struct StagingLimits {
  std::chrono::milliseconds silence = std::chrono::minutes(10);
  int max_moves_per_source = 32;
};

// A move in flight that DropSilent rolled back.
struct DroppedMove {
  std::string agent, move, source, phase;  // phase: offered, copied or switched
  uint64_t epoch = 0;
};

class MoveTarget : public TargetApi {
 public:
  // Opens (creating) the root and empties every staging area a previous run left.
  // `seal_key`: this sidecar's X25519 private key; switches are sealed to its public half.
  static Result<std::unique_ptr<MoveTarget>> Open(const std::string& root, EvpPkeyPtr seal_key);

  Result<OfferReply> Offer(const OfferRequest& request) override;
  Result<HaveMap> Copy(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Switch(const std::string& agent, const std::string& move, ByteSource* stream) override;
  Status Activate(const std::string& agent, const std::string& move, uint64_t epoch) override;
  Result<QueryReply> Query(const std::string& agent, const std::string& move) override;
  Status Abort(const std::string& agent, const std::string& move) override;

  // Starts the agent an activation put in place, before activate is answered: called with
  // the agent and its capsule folder (the sidecar mounts it there, --mount-to). When it fails
  // (leaving nothing running on the folder) the activation is undone: the copy it replaced,
  // if any, is put back, and activate is refused, so the source keeps the agent (the query
  // that follows finds the epoch this machine held before). Unset: activate starts nothing.
  void set_start_agent(std::function<Status(const std::string&, const std::string&)> hook) {
    start_agent_ = std::move(hook);
  }

  // Called on an offer when this machine's retired copy of the agent is still mounted, with
  // the agent and its capsule folder: unmounts it if it may (a retired mount takes no write,
  // so nothing is lost), or says why not. Without it such an offer is refused.
  void set_release_retired(std::function<Status(const std::string&, const std::string&)> hook) {
    release_retired_ = std::move(hook);
  }

  // Called at activate, before the step that makes this machine the holder, with the agent,
  // the move and the new epoch: makes this machine the holder of record elsewhere (the fleet's
  // registry, move/fleet/registry.h). Refused: activate is refused and the move rolled back.
  // Ok: a function that undoes the claim, called when the activation is undone after it.
  using ClaimHolder = std::function<Result<std::function<void()>>(const std::string&, const std::string&, uint64_t)>;
  void set_claim_holder(ClaimHolder hook) { claim_holder_ = std::move(hook); }

  // Builds (or finds in the cache at `cache`) each arriving agent's sandbox before the move
  // can activate: at the copy, while the agent still runs on the source, and again at the
  // switch only when the switch changed what the sandbox is made of. A sandbox that cannot
  // be built refuses the move (rolled back, the source resumes). Unset: no sandbox is built.
  void set_sandbox_cache(std::string cache) { sandbox_cache_ = std::move(cache); }

  // Set before the first call.
  void set_staging_limits(StagingLimits limits) { limits_ = limits; }
  // Rolls back every move in flight that no call has been made for (none running, none
  // waiting) for longer than the limits' silence: its staging area is removed and it is
  // forgotten, as if its source had aborted it (a late call of it is refused, and the
  // source's query finds the epoch held before). Returns what it dropped.
  std::vector<DroppedMove> DropSilent();
  // The moves in flight: (agent, move) of each.
  std::vector<std::pair<std::string, std::string>> PendingMoves();

  const std::string& root() const { return root_; }
  std::string CapsuleDir(const std::string& agent) const;
  std::string StagingDir(const std::string& agent) const;

 private:
  enum class Phase { kOffered, kCopied, kSwitched };
  struct Pending {
    std::string move;
    uint64_t epoch = 0;
    Phase phase = Phase::kOffered;
    std::string source;  // OfferRequest::source
    // When the last call for the agent began or ended: the last word from the source.
    std::chrono::steady_clock::time_point last_word = std::chrono::steady_clock::now();
    journal::CheckedJournal journal;  // what the copy checked of the staged journal
    journal::render::ModelChoices choices;  // the staged journal's models, as the copy found them
    std::string sandbox;              // the digest of the sandbox the copy built, if any
    std::optional<StagedDocuments> staged;  // the staged manifest and snapshot as the copy saved them
  };

  MoveTarget(std::string root, EvpPkeyPtr seal_key, std::string seal_key_hex)
      : root_(std::move(root)), seal_key_(std::move(seal_key)), seal_key_hex_(std::move(seal_key_hex)) {}

  // One call's hold on one agent: its lock, taken for the whole call. The map keeps an
  // agent's lock only while a call holds or waits for it, so a peer that sends many agent
  // ids leaves nothing behind.
  class AgentCall {
   public:
    AgentCall(MoveTarget* target, std::string agent, std::shared_ptr<std::mutex> mutex)
        : target_(target), agent_(std::move(agent)), mutex_(std::move(mutex)), lock_(*mutex_) {}
    AgentCall(AgentCall&& other) noexcept
        : target_(std::exchange(other.target_, nullptr)),
          agent_(std::move(other.agent_)),
          mutex_(std::move(other.mutex_)),
          lock_(std::move(other.lock_)) {}
    AgentCall& operator=(AgentCall&&) = delete;
    ~AgentCall();

   private:
    MoveTarget* target_;
    std::string agent_;
    std::shared_ptr<std::mutex> mutex_;
    std::unique_lock<std::mutex> lock_;
  };
  // Refuses an agent id that is not one (CheckAgentId) or a move id that is not one
  // (CheckMoveId) before anything is kept or touched for them, then takes the agent's lock.
  Result<AgentCall> LockAgent(const std::string& agent, const std::string& move);
  // The pending move of `agent` when it is `move` in `phase`; FailedPrecondition otherwise.
  Result<Pending*> Expect(const std::string& agent, const std::string& move, Phase phase, const char* call);
  // Empties the agent's staging area and forgets its pending move.
  void Drop(const std::string& agent);
  // Runs `step`; on failure the move is rolled back here (Drop) before the error returns.
  Status OrDrop(const std::string& agent, Status status);
  // Undoes the one step of an activation: the copy it replaced (`replaced`) or nothing back
  // at `dir`, the activated capsule back at `staging`, for Drop to empty.
  Status PutBack(const std::string& dir, const std::string& staging, bool replaced);
  // The staged capsule's sandbox, built or found in the cache (set_sandbox_cache); its
  // digest, or "" when this target builds none. `built` is the digest already built for
  // this move: the same one is not looked up again.
  Result<std::string> PrepareSandbox(const std::string& staging, const std::string& built);

  std::string root_;
  EvpPkeyPtr seal_key_;
  std::string seal_key_hex_;
  std::function<Status(const std::string&, const std::string&)> start_agent_;
  std::function<Status(const std::string&, const std::string&)> release_retired_;
  ClaimHolder claim_holder_;
  std::string sandbox_cache_;
  StagingLimits limits_;
  Mutex mu_;  // never held while an agent's lock is taken
  std::map<std::string, std::shared_ptr<std::mutex>> locks_ GUARDED_BY(mu_);  // only agents a call holds or awaits
  // A Pending's fields are read and written by the call holding its agent's lock.
  std::map<std::string, Pending> pending_ GUARDED_BY(mu_);

 public:
  // For tests: how many agents' locks the target keeps now.
  size_t agent_locks_kept() {
    std::lock_guard guard(mu_);
    return locks_.size();
  }
};

// The newest epoch this machine knows for the capsule at `dir`: its holder record's, or the
// manifest's when the record is lost (a machine is never fooled into taking an older epoch
// by losing its record). 0 when there is no capsule.
uint64_t KnownEpoch(const std::string& dir);

// What is checked of a staged capsule besides what applying a stream checks (its digests and
// the journal's chains): every conversation the staged journal names a model in (as
// `choices` gathered them from its lines) resolves a provider and model this machine renders
// for, and the environment spec is checked (man/capsule-protocol.7).
Status PrepareStaged(const std::string& staging, const journal::render::ModelChoices& choices);

}  // namespace capsule::move
