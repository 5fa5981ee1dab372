#include "move/move_target.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <set>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/format/copy.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/holder.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"
#include "capsule/format/mount_lock.h"
#include "fs/control_client.h"
#include "journal/check.h"
#include "journal/render/render.h"
#include "move/seal/envelope.h"
#include "move/stream/plan.h"
#include "move/stream/unpack.h"
#include "sandbox/sandbox_cache.h"
#include "sandbox/sandbox_spec.h"

namespace capsule::move {

namespace {


std::string MoveOf(const std::string& dir) {
  Result<DirFd> root = DirFd::OpenGiven(dir);
  if (!root.ok()) return "";
  Result<std::string> text = root->ReadFileBounded(local::kMoveRecord, 1 << 20, "a move's record");
  if (!text.ok()) return "";
  Result<Json> json = ParseJson(*text, local::kMoveRecord, Code::kCorruption);
  return json.ok() && json->is_object() ? json->value("move", "") : "";
}

}  // namespace

uint64_t KnownEpoch(const std::string& dir) {
  uint64_t epoch = 0;
  Result<HolderRecord> record = HolderRecord::Load(dir);
  if (record.ok()) epoch = record->epoch;
  Result<Manifest> manifest = Manifest::Load(dir);
  if (manifest.ok()) epoch = std::max(epoch, manifest->holder_epoch);
  return epoch;
}

journal::LineVisitor GatherModelChoices(journal::render::ModelChoices* choices) {
  return [choices](const journal::EventLine& line) -> Status {
    if (!journal::render::ModelChoices::NamesModel(line.type)) return Status::Ok();
    CAPSULE_ASSIGN_OR_RETURN(journal::Event event, journal::ToEvent(line, "journal"));
    choices->Add(event);
    return Status::Ok();
  };
}

Status PrepareStaged(const std::string& staging, const journal::render::ModelChoices& choices) {
  // Every conversation that names a model resolves the provider and model a request for it
  // goes to (as capsule render resolves them), so that an agent this machine could not send
  // to its model is refused before the point of no return. (Rendering the request itself,
  // with no context budget, fails only for a conversation with nothing to send yet, which
  // any agent may be in: the request is not built, nor the journal held to build it.)
  for (const std::string& conversation : choices.Conversations()) {
    journal::render::TargetRequest request;
    request.conversation = conversation;
    Result<journal::render::RenderTarget> target = choices.Resolve(request);
    if (!target.ok()) return target.status().WithContext("rendering the staged journal");
  }
  CAPSULE_ASSIGN_OR_RETURN(DirFd staged, DirFd::OpenGiven(staging));
  CAPSULE_ASSIGN_OR_RETURN(std::string spec, staged.ReadFileBounded(kEnvironmentSpecPath, 16 << 20, "an environment spec"));
  return CheckEnvironmentSpec(spec).WithContext("staged environment spec");
}

Result<std::unique_ptr<MoveTarget>> MoveTarget::Open(const std::string& root, EvpPkeyPtr seal_key) {
  CAPSULE_ASSIGN_OR_RETURN(std::string key_hex, PublicKeyHex(seal_key.get()));
  std::string staging_root = JoinPath(root, kStagingDir);
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(staging_root));
  // Whatever a previous run left staged never activated, or is the copy an activation
  // replaced: neither is held, both go.
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> left, ListTree(staging_root));
  for (const TreeEntry& entry : left) {
    if (entry.path.find('/') == std::string::npos) CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(staging_root, entry.path)));
  }
  return std::unique_ptr<MoveTarget>(new MoveTarget(root, std::move(seal_key), key_hex));
}

std::string MoveTarget::CapsuleDir(const std::string& agent) const { return JoinPath(root_, agent); }
std::string MoveTarget::StagingDir(const std::string& agent) const {
  return JoinPath(JoinPath(root_, kStagingDir), agent);
}

MoveTarget::AgentCall::~AgentCall() {
  if (target_ == nullptr) return;
  lock_.unlock();
  mutex_.reset();
  std::lock_guard guard(target_->mu_);
  if (auto pending = target_->pending_.find(agent_); pending != target_->pending_.end()) {
    pending->second.last_word = std::chrono::steady_clock::now();  // a call just ended
  }
  auto it = target_->locks_.find(agent_);
  // Only the map's reference left: no other call holds this lock or waits for it (each takes
  // its reference under mu_ before it waits).
  if (it != target_->locks_.end() && it->second.use_count() == 1) target_->locks_.erase(it);
}

Result<MoveTarget::AgentCall> MoveTarget::LockAgent(const std::string& agent, const std::string& move) {
  if (Status id = CheckAgentId(agent); !id.ok()) {
    return Status::InvalidArgument("agent id " + ShownText(agent),
                                   "not an agent id (1 to 128 letters, digits, '.', '_' or '-', not starting with '.')");
  }
  CAPSULE_RETURN_IF_ERROR(CheckMoveId(move));
  std::shared_ptr<std::mutex> mutex;
  {
    std::lock_guard guard(mu_);
    std::shared_ptr<std::mutex>& slot = locks_[agent];
    if (!slot) slot = std::make_shared<std::mutex>();
    mutex = slot;
  }
  AgentCall call(this, agent, std::move(mutex));
  std::lock_guard guard(mu_);
  if (auto pending = pending_.find(agent); pending != pending_.end()) {
    pending->second.last_word = std::chrono::steady_clock::now();  // a call begins
  }
  return call;
}

std::vector<DroppedMove> MoveTarget::DropSilent() {
  auto silent_since = [this](const Pending& pending) {
    return std::chrono::steady_clock::now() - pending.last_word > limits_.silence;
  };
  std::vector<std::string> silent;
  {
    std::lock_guard guard(mu_);
    for (const auto& [agent, pending] : pending_) {
      if (silent_since(pending) && !locks_.count(agent)) silent.push_back(agent);
    }
  }
  std::vector<DroppedMove> dropped;
  for (const std::string& agent : silent) {
    std::shared_ptr<std::mutex> mutex;
    {
      std::lock_guard guard(mu_);
      if (locks_.count(agent)) continue;  // a call came meanwhile: the source spoke
      mutex = locks_[agent] = std::make_shared<std::mutex>();
    }
    // The agent's lock, as a call takes it (at once: no call holds or awaits it), so that no
    // call of the move runs while it is rolled back; one that comes after finds no move.
    AgentCall hold(this, agent, std::move(mutex));
    DroppedMove gone;
    {
      std::lock_guard guard(mu_);
      auto it = pending_.find(agent);
      if (it == pending_.end() || !silent_since(it->second)) continue;
      static constexpr const char* kPhaseNames[] = {"offered", "copied", "switched"};
      gone = DroppedMove{agent, it->second.move, it->second.source, kPhaseNames[static_cast<int>(it->second.phase)],
                         it->second.epoch};
    }
    Drop(agent);
    dropped.push_back(std::move(gone));
  }
  return dropped;
}

std::vector<std::pair<std::string, std::string>> MoveTarget::PendingMoves() {
  std::lock_guard lock(mu_);
  std::vector<std::pair<std::string, std::string>> moves;
  for (const auto& [agent, pending] : pending_) moves.emplace_back(agent, pending.move);
  return moves;
}

Result<MoveTarget::Pending*> MoveTarget::Expect(const std::string& agent, const std::string& move, Phase phase,
                                                const char* call) {
  std::lock_guard lock(mu_);
  auto it = pending_.find(agent);
  if (it == pending_.end() || it->second.move != move) {
    return Status::FailedPrecondition(std::string(call) + " of move " + move,
                                      "no such move of agent " + agent + " is in progress here");
  }
  if (it->second.phase != phase) {
    return Status::FailedPrecondition(std::string(call) + " of move " + move, "out of order");
  }
  return &it->second;
}

void MoveTarget::Drop(const std::string& agent) {
  (void)RemoveTree(StagingDir(agent));
  std::lock_guard lock(mu_);
  pending_.erase(agent);
}

Status MoveTarget::OrDrop(const std::string& agent, Status status) {
  if (!status.ok()) Drop(agent);
  return status;
}

Result<OfferReply> MoveTarget::Offer(const OfferRequest& request) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(request.agent, request.move));
  const std::string what = "offer of agent " + request.agent + " at epoch " + std::to_string(request.epoch);
  CAPSULE_RETURN_IF_ERROR(CheckEpoch(request.epoch).WithContext("offer of agent " + request.agent));
  std::string dir = CapsuleDir(request.agent);
  bool have_copy = PathExists(JoinPath(dir, kManifestPath));
  bool mounted = false;
  if (have_copy) {
    Result<HolderRecord> record = HolderRecord::Load(dir);
    if (record.ok() && record->state != HolderState::kRetired) {
      return Status::FailedPrecondition(what, std::string("this machine holds the agent (") + HolderStateName(record->state) +
                                                  " at epoch " + std::to_string(record->epoch) + ")");
    }
    Result<std::string> socket = fs::FindControlSocket(dir);
    mounted = socket.ok() && fs::SendControl(*socket, "status").ok();
    Result<Manifest> manifest = Manifest::Load(dir);
    if (manifest.ok() && manifest->agent.id != request.agent) {
      return Status::FailedPrecondition(what, "the folder " + dir + " holds agent " + manifest->agent.id);
    }
  }
  uint64_t known = KnownEpoch(dir);
  {
    std::lock_guard lock(mu_);
    auto pending = pending_.find(request.agent);
    if (pending != pending_.end()) known = std::max(known, pending->second.epoch - (pending->second.move == request.move ? 1 : 0));
  }
  if (request.epoch <= known) {
    return Status::FailedPrecondition(what, "refused: this machine knows epoch " + std::to_string(known) +
                                                " of the agent, and an offer must be newer");
  }
  {
    // A source may have so many moves in flight here (each a staging area); an offer for an
    // agent it is moving already replaces that move.
    std::lock_guard lock(mu_);
    int in_flight = 0;
    for (const auto& [agent, pending] : pending_) {
      if (agent != request.agent && pending.source == request.source) ++in_flight;
    }
    if (in_flight >= limits_.max_moves_per_source) {
      return Status::FailedPrecondition(
          what, "refused: " + std::to_string(in_flight) + " moves from " +
                    (request.source.empty() ? std::string("this source") : ShownText(request.source)) +
                    " are in flight here, the most one source may have (capsule serve --max-moves-per-source); "
                    "try again once one has ended");
    }
  }
  if (mounted) {  // only now that the offer is one to take: a refused one changes nothing
    if (!release_retired_) {
      return Status::FailedPrecondition(what, "its retired copy is mounted here; unmount it first");
    }
    CAPSULE_RETURN_IF_ERROR(release_retired_(request.agent, dir).WithContext(what));
  }
  // A driver still writing its last checkpoint of the retired copy: the clone waits for it.
  if (have_copy) CAPSULE_RETURN_IF_ERROR(WaitForDriverToExit(dir).WithContext(what));
  Drop(request.agent);  // a newer offer replaces a move that never activated
  std::string staging = StagingDir(request.agent);
  OfferReply reply;
  reply.seal_key_hex = seal_key_hex_;
  reply.held_epoch = known;
  reply.journal_append = true;
  Status staged = [&]() -> Status {
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(staging));
    if (have_copy) {
      // Its holder record stays behind: a staging area is held by no one until activate
      // writes one.
      CAPSULE_RETURN_IF_ERROR(CopyCapsule(dir, staging, {local::kMachine}));
      CAPSULE_ASSIGN_OR_RETURN(reply.have, HaveOfCapsule(staging));
    }
    return Status::Ok();
  }();
  CAPSULE_RETURN_IF_ERROR(OrDrop(request.agent, staged));
  std::lock_guard lock(mu_);
  Pending& pending = pending_[request.agent];
  pending = Pending{};
  pending.move = request.move;
  pending.epoch = request.epoch;
  pending.source = request.source;
  return reply;
}

Result<std::string> MoveTarget::PrepareSandbox(const std::string& staging, const std::string& built) {
  if (sandbox_cache_.empty()) return std::string();
  CAPSULE_ASSIGN_OR_RETURN(sandbox::SandboxSpec spec, sandbox::SandboxSpec::Load(staging));
  std::string digest = spec.Digest();
  if (digest == built) return digest;
  CAPSULE_ASSIGN_OR_RETURN(sandbox::SandboxCache cache, sandbox::SandboxCache::Open(sandbox_cache_));
  Result<sandbox::SandboxCache::Built> ready = cache.Build(spec);
  if (!ready.ok()) return ready.status().WithContext("this machine cannot build the agent's sandbox");
  if (!ready->cache_hit) {
    std::cerr << "capsule: serve: built sandbox " << digest.substr(0, 12) << " (" << spec.image << ") in "
              << static_cast<int>(ready->seconds + 0.5) << " s\n";
  }
  return digest;
}

Result<HaveMap> MoveTarget::Copy(const std::string& agent, const std::string& move, ByteSource* stream) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(agent, move));
  CAPSULE_ASSIGN_OR_RETURN(Pending * pending, Expect(agent, move, Phase::kOffered, "copy"));
  std::string staging = StagingDir(agent);
  uint64_t epoch = pending->epoch;
  journal::CheckedJournal checked;
  journal::render::ModelChoices choices;
  std::string sandbox;
  std::optional<StagedDocuments> staged;
  Result<HaveMap> have = [&]() -> Result<HaveMap> {
    ApplyOptions options;
    options.expected_phase = move::Phase::kCopy;
    options.expected_move = move;
    options.expected_agent = agent;
    CAPSULE_ASSIGN_OR_RETURN(options.holder_machine, LoadOrCreateMachineId(staging));
    options.holder_epoch = epoch;
    options.checked_journal = &checked;
    options.visit_journal = GatherModelChoices(&choices);
    options.staged = &staged;
    // Synced at its end, while the agent still runs, so that the switch's sync has only the
    // change to write; the whole journal is checked and rendered here, so that the switch
    // reads only what was appended since.
    CAPSULE_RETURN_IF_ERROR(ApplyStreamToStaging(stream, staging, options, nullptr));
    CAPSULE_RETURN_IF_ERROR(PrepareStaged(staging, choices));
    // The sandbox too, while the agent still runs on the source: none of it is frozen time.
    CAPSULE_ASSIGN_OR_RETURN(sandbox, PrepareSandbox(staging, ""));
    return HaveOfCapsule(staging);
  }();
  if (!have.ok()) {
    Drop(agent);
    return have.status().WithContext("copy of move " + move);
  }
  std::lock_guard lock(mu_);
  pending_[agent].phase = Phase::kCopied;
  pending_[agent].journal = std::move(checked);
  pending_[agent].choices = std::move(choices);
  pending_[agent].sandbox = std::move(sandbox);
  pending_[agent].staged = std::move(staged);
  return have;
}

Status MoveTarget::Switch(const std::string& agent, const std::string& move, ByteSource* stream) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(agent, move));
  CAPSULE_ASSIGN_OR_RETURN(Pending * pending, Expect(agent, move, Phase::kCopied, "switch"));
  std::string staging = StagingDir(agent);
  uint64_t epoch = pending->epoch;
  journal::CheckedJournal checked = pending->journal;
  // The copy's choices, continued by the events the switch brings (a journal the switch
  // replaced whole brings all of its own, which come after: each conversation's latest wins).
  journal::render::ModelChoices choices = pending->choices;
  std::string sandbox = pending->sandbox;
  std::optional<StagedDocuments> staged;
  {
    std::lock_guard lock(mu_);
    staged = std::exchange(pending->staged, std::nullopt);
  }
  Status applied = [&]() -> Status {
    CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<EnvelopeReader> opened, EnvelopeReader::Open(stream, seal_key_.get()));
    ApplyOptions options;
    options.sealed = true;
    options.expected_phase = move::Phase::kSwitch;
    options.expected_move = move;
    options.expected_agent = agent;
    CAPSULE_ASSIGN_OR_RETURN(options.holder_machine, LoadOrCreateMachineId(staging));
    options.holder_epoch = epoch;
    options.checked_journal = &checked;
    options.visit_journal = GatherModelChoices(&choices);
    options.staged = &staged;
    CAPSULE_RETURN_IF_ERROR(ApplyStreamToStaging(opened.get(), staging, options, nullptr));
    // Applied and synced: all of it is durable before activate can be answered.
    CAPSULE_RETURN_IF_ERROR(PrepareStaged(staging, choices));
    // Built at the copy; built here (frozen) only when the switch changed its image or packages.
    return PrepareSandbox(staging, sandbox).status();
  }();
  CAPSULE_RETURN_IF_ERROR(OrDrop(agent, applied.WithContext("switch of move " + move)));
  std::lock_guard lock(mu_);
  pending_[agent].phase = Phase::kSwitched;
  return Status::Ok();
}

Status MoveTarget::Activate(const std::string& agent, const std::string& move, uint64_t epoch) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(agent, move));
  CAPSULE_RETURN_IF_ERROR(CheckEpoch(epoch).WithContext("activate of move " + move));
  std::string dir = CapsuleDir(agent);
  Result<HolderRecord> held = HolderRecord::Load(dir);
  if (held.ok() && held->epoch == epoch && held->state != HolderState::kRetired && MoveOf(dir) == move) {
    return Status::Ok();  // this move activated already (its reply was lost): the same answer
  }
  CAPSULE_ASSIGN_OR_RETURN(Pending * pending, Expect(agent, move, Phase::kSwitched, "activate"));
  if (pending->epoch != epoch) {
    return Status::FailedPrecondition("activate of move " + move, "offered at epoch " + std::to_string(pending->epoch) +
                                                                     ", not " + std::to_string(epoch));
  }
  std::function<void()> unclaim = [] {};
  if (claim_holder_) {
    Result<std::function<void()>> claimed = claim_holder_(agent, move, epoch);
    if (!claimed.ok()) {
      Drop(agent);
      return claimed.status().WithContext("activate of move " + move);
    }
    unclaim = std::move(*claimed);
  }
  std::string staging = StagingDir(agent);
  const bool replaced = PathExists(dir);
  Status done = [&]() -> Status {
    CAPSULE_ASSIGN_OR_RETURN(std::string machine, LoadOrCreateMachineId(staging));
    HolderRecord record{agent, machine, epoch, HolderState::kActive, "", false};
    CAPSULE_RETURN_IF_ERROR(record.Save(staging));
    // The one step that makes this machine the holder.
    if (replaced) {
      if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
        return Status::IOError(dir, errno);
      }
    } else if (::rename(staging.c_str(), dir.c_str()) != 0) {
      return Status::IOError(dir, errno);
    }
    CAPSULE_RETURN_IF_ERROR(SyncDirectory(root_));
    return Status::Ok();
  }();
  if (!done.ok()) {
    unclaim();
    Drop(agent);
    return done.WithContext("activate of move " + move);
  }
  // The agent runs here before the source hears it moved: started (mounted) now, under the
  // agent's lock, so a query waits for the outcome; one that cannot start undoes the step
  // above and refuses, and the source, finding the epoch this machine held before, keeps it.
  if (start_agent_) {
    if (Status started = start_agent_(agent, dir); !started.ok()) {
      Status put_back = PutBack(dir, staging, replaced);
      if (!put_back.ok()) {
        // Two faults at once: the record in place says this machine holds the new epoch, which
        // the source's query will find; the agent is held here, not started.
        return Status::IOError("activate of move " + move,
                               "the agent could not be started here (" + started.message() +
                                   ") and the activation could not be undone (" + put_back.message() +
                                   "): this machine holds it at epoch " + std::to_string(epoch) + ", not started");
      }
      unclaim();
      Drop(agent);
      return Status::FailedPrecondition("activate of move " + move,
                                        "the agent could not be started here (" + started.message() +
                                            "), so this machine does not take it over and the source keeps it");
    }
  }
  {
    std::lock_guard lock(mu_);
    pending_.erase(agent);
  }
  // The staging area now holds the copy this one replaced, if any: it goes after the answer,
  // under another name so that the next offer's staging area is not in its way (and a crash
  // leaves it under .staging/, which the next start empties).
  if (PathExists(staging)) {
    std::string old = JoinPath(JoinPath(root_, kStagingDir), ".replaced-" + move);
    if (::rename(staging.c_str(), old.c_str()) == 0) {
      std::thread([old] { (void)RemoveTree(old); }).detach();
    } else {
      (void)RemoveTree(staging);
    }
  }
  return Status::Ok();
}

Status MoveTarget::PutBack(const std::string& dir, const std::string& staging, bool replaced) {
  if (replaced) {
    if (::renameat2(AT_FDCWD, staging.c_str(), AT_FDCWD, dir.c_str(), RENAME_EXCHANGE) != 0) {
      return Status::IOError(dir, errno);
    }
  } else if (::rename(dir.c_str(), staging.c_str()) != 0) {
    return Status::IOError(dir, errno);
  }
  return SyncDirectory(root_);
}

Result<QueryReply> MoveTarget::Query(const std::string& agent, const std::string& move) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(agent, move));
  {
    // The answer is final: a move not activated now never will be, so a late activate
    // (from a connection the source gave up on) cannot make two holders.
    std::lock_guard lock(mu_);
    auto it = pending_.find(agent);
    if (it != pending_.end() && it->second.move == move) {
      pending_.erase(it);
      (void)RemoveTree(StagingDir(agent));
    }
  }
  QueryReply reply;
  Result<HolderRecord> record = HolderRecord::Load(CapsuleDir(agent));
  if (record.ok() && record->agent == agent) {
    reply.epoch = record->epoch;
    reply.state = HolderStateName(record->state);
  } else {
    reply.state = "none";
  }
  return reply;
}

Status MoveTarget::Abort(const std::string& agent, const std::string& move) {
  CAPSULE_ASSIGN_OR_RETURN(AgentCall agent_call, LockAgent(agent, move));
  bool ours = false;
  {
    std::lock_guard lock(mu_);
    auto it = pending_.find(agent);
    ours = it != pending_.end() && it->second.move == move;
  }
  if (ours) Drop(agent);
  return Status::Ok();
}

}  // namespace capsule::move
