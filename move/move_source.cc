#include "move/move_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/process_lock.h"
#include "capsule/base/sha256.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/schedule.h"
#include "capsule/format/trust.h"
#include "capsule/format/verify.h"
#include "move/byte_pipe.h"
#include "move/local_capsule.h"
#include "move/seal/envelope.h"
#include "move/stream/writer.h"

namespace capsule::move {

namespace {

constexpr char kCrashWhat[] = "simulated crash";

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Status SaveOutgoing(const std::string& dir, const OutgoingMove& move) {
  Json json = {{"agent", move.agent}, {"epoch", move.epoch}, {"move", move.move}, {"phase", move.phase}, {"to", move.to}};
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(json, local::kOutgoingMove));
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  return root.WriteFileAtomic(local::kOutgoingMove, text + "\n", 0644);
}

Status RemoveOutgoing(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  Status removed = root.Unlink(local::kOutgoingMove);
  if (!removed.ok() && removed.code() != Code::kNotFound) return removed;
  return root.SyncDir(kLocalDir);
}

// Blobs are sent as read, unhashed (the target hashes what it writes): a file the target
// refuses for its digest was damaged either in transit or here. The blobs here are checked to
// tell which, and a blob that no longer matches its name is added to the reason. Only the
// blobs' own damage is named: a mount at work has blobs its last checkpoint does not list yet.
Status NameDamageHere(const std::string& dir, Status refused) {
  if (refused.message().find("digest differs") == std::string::npos) return refused;
  Result<VerifyReport> report = VerifyFolder(dir);
  if (!report.ok()) return refused;
  std::vector<std::string> damaged;
  for (const std::string& problem : report->problems) {
    if (problem.find("blob digest does not match its name") != std::string::npos) damaged.push_back(problem);
  }
  if (damaged.empty()) return refused;
  std::string why = "damaged at the source, not in transit: " + damaged.front();
  if (damaged.size() > 1) why += " (and " + std::to_string(damaged.size() - 1) + " more blobs)";
  return Status::Make(refused.code(), refused.message(), why + "; see capsule verify " + dir);
}

// Counts what a pack writes.
class CountingSink : public ByteSink {
 public:
  explicit CountingSink(ByteSink* out) : out_(out) {}
  Status Write(std::string_view data) override {
    bytes_ += data.size();
    return out_->Write(data);
  }
  Status Close() override { return out_->Close(); }
  uint64_t bytes() const { return bytes_; }

 private:
  ByteSink* out_;
  uint64_t bytes_ = 0;
};

// Packs the capsule on a thread into a bounded pipe while `send` hands the other end to the
// target: constant memory whatever the capsule's size. `seal_to` (raw X25519) seals it.
template <typename Send>
Status PackAndSend(const std::string& dir, const PackOptions& pack, const std::string& seal_to, const char* phase,
                   PackStats* stats, uint64_t* bytes, Send send) {
  BytePipe pipe;
  BytePipe::Sink pipe_sink(&pipe);
  CountingSink counted(&pipe_sink);
  Status packed;
  std::thread producer([&] {
    packed = [&]() -> Status {
      ByteSink* sink = &counted;
      std::unique_ptr<EnvelopeWriter> envelope;
      if (!seal_to.empty()) {
        CAPSULE_ASSIGN_OR_RETURN(envelope, EnvelopeWriter::Create(&counted, seal_to));
        sink = envelope.get();
      }
      return PackCapsule(dir, pack, sink, stats);
    }();
    pipe.CloseWrite(packed.ok() ? Status::Ok() : packed);
  });
  BytePipe::Source source(&pipe);
  Status sent = send(&source);
  pipe.CloseRead();
  producer.join();
  *bytes = counted.bytes();
  // The target's error explains more than the pack's "stopped reading" that it caused.
  if (!sent.ok()) return sent;
  if (!packed.ok()) return packed.WithContext(std::string(phase) + " stream");
  return sent;
}

class Mover {
 public:
  Mover(LocalCapsule local, TargetApi* target, const MoveOptions& options)
      : local_(std::move(local)), dir_(local_.dir()), target_(target), options_(options) {}

  Result<MoveReport> Run();
  // After "activate sent": ask, then retire (true) or thaw (false); Unavailable while there is
  // no answer. `why` says why it asks, for MoveOptions::on_wait.
  Result<bool> Resolve(const OutgoingMove& move, const std::string& why);
  // Before it: abort at the target, thaw here, forget the move.
  Status Rollback(const OutgoingMove& move, Status why);

 private:
  bool Crash(const std::string& step) const { return options_.crash_after == step; }
  void BeginPhase(const char* phase) {
    if (options_.progress != nullptr) options_.progress->Begin(phase, 0, 0);
  }

  LocalCapsule local_;
  std::string dir_;
  TargetApi* target_;
  const MoveOptions& options_;
};

Status CrashStatus(const std::string& step) { return Status::Unavailable(kCrashWhat, "after " + step); }

Result<MoveReport> Mover::Run() {
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir_));
  Result<HolderRecord> record = HolderRecord::Load(dir_);
  if (!record.ok()) {
    return Status::FailedPrecondition(dir_, "not held by this machine (" + record.status().message() +
                                                "); only its holder may move it (see capsule-protocol(7))");
  }
  if (record->agent != manifest.agent.id) {
    return Status::Corruption(dir_, "the holder record is for agent " + record->agent + ", the manifest for " + manifest.agent.id);
  }
  if (record->state != HolderState::kActive) {
    return Status::FailedPrecondition(dir_, std::string("is ") + HolderStateName(record->state) + " at epoch " +
                                                std::to_string(record->epoch) + "; only an active holder moves it");
  }
  // A capsule at rest is trusted before anything is offered (capsule/format/trust.h); a
  // mounted one was checked by its mount.
  if (!local_.mounted()) CAPSULE_RETURN_IF_ERROR(CheckTrusted(dir_).WithContext("move " + manifest.agent.id));
  // Schedules travel only while paused: refused before anything is offered. The switch's pack
  // checks again (they may be resumed during the copy), before the point of no return.
  CAPSULE_RETURN_IF_ERROR(CheckSchedulesMayTravel(dir_).WithContext("move " + manifest.agent.id));
  // Nor does a secret: a spec that carries one is refused before anything is offered.
  CAPSULE_RETURN_IF_ERROR(CheckSpecHoldsNoSecret(dir_).WithContext("move " + manifest.agent.id));
  if (record->epoch >= kMaxEpoch) {
    return Status::FailedPrecondition(dir_, "is at epoch " + std::to_string(record->epoch) +
                                                ", the largest a move may take it to (2^53-1); it cannot move again");
  }
  OutgoingMove move;
  move.agent = manifest.agent.id;
  move.epoch = record->epoch + 1;
  move.to = options_.to;
  move.phase = "offered";
  CAPSULE_ASSIGN_OR_RETURN(move.move, NewMoveId());
  MoveReport report;
  report.move = move.move;
  report.agent = move.agent;
  report.epoch = move.epoch;
  CAPSULE_RETURN_IF_ERROR(SaveOutgoing(dir_, move));

  Result<OfferReply> offer = target_->Offer(OfferRequest{move.agent, move.epoch, move.move, ""});
  if (Crash("offered")) return CrashStatus("offered");
  if (!offer.ok()) return Rollback(move, offer.status().WithContext("offer"));
  Result<std::string> seal_to = HexDecode(offer->seal_key_hex, "the target's sealing key");
  if (!seal_to.ok() || seal_to->size() != 32) {
    return Rollback(move, Status::Corruption("offer reply", "the target's sealing key is not an X25519 public key"));
  }

  // Copy: the agent keeps running; only what the target lacks crosses.
  PackOptions copy;
  copy.phase = Phase::kCopy;
  copy.move_id = move.move;
  copy.have = offer->have;
  copy.epoch = move.epoch;
  copy.progress = options_.progress;
  copy.hash_blobs = false;  // the target hashes what it writes
  PackStats copy_stats;
  Clock::time_point copy_start = Clock::now();
  HaveMap staged;
  Status copied = PackAndSend(dir_, copy, "", "copy", &copy_stats, &report.copy_bytes, [&](ByteSource* s) {
    Result<HaveMap> have = target_->Copy(move.agent, move.move, s);
    if (have.ok()) staged = std::move(*have);
    return have.status();
  });
  report.copy_seconds = SecondsSince(copy_start);
  report.copy_files = copy_stats.files_sent;
  report.copy_skipped = copy_stats.files_skipped;
  if (Crash("copied")) return CrashStatus("copied");
  if (!copied.ok()) return Rollback(move, NameDamageHere(dir_, copied.WithContext("copy")));
  // The link is idle meanwhile (the mount hashes on every core); a link idle past a minute
  // is dialled again before the switch (RemoteTarget), so the sidecar's 300-second read
  // timeout never ends a move that is only busy here.
  BeginPhase("preverify");
  Clock::time_point preverify_start = Clock::now();
  local_.PrepareFreeze();
  report.preverify_seconds = SecondsSince(preverify_start);

  // Freeze: from here the agent waits; what changed since the copy is all that crosses.
  move.phase = "frozen";
  if (Status saved = SaveOutgoing(dir_, move); !saved.ok()) return Rollback(move, saved);
  BeginPhase("freeze");
  Clock::time_point frozen_at = Clock::now();
  Status frozen = local_.Freeze(move.move);
  report.freeze_seconds = SecondsSince(frozen_at);
  if (Crash("frozen")) return CrashStatus("frozen");
  if (!frozen.ok()) return Rollback(move, frozen);

  PackOptions change;
  change.phase = Phase::kSwitch;
  change.move_id = move.move;
  // The target holds the journal the copy sent when its have names that digest: only what was
  // appended since crosses (the journal only grows; the pack checks that it still begins so),
  // to a target that takes it so.
  if (auto held = staged.find(kStreamJournal); offer->journal_append && held != staged.end() &&
                                                !copy_stats.journal.sha256.empty() &&
                                                held->second == copy_stats.journal.sha256) {
    change.held_journal = copy_stats.journal;
  }
  change.have = staged;
  change.epoch = move.epoch;
  change.progress = options_.progress;
  change.hash_blobs = false;
  PackStats switch_stats;
  Status switched = PackAndSend(dir_, change, *seal_to, "switch", &switch_stats, &report.switch_bytes,
                                [&](ByteSource* s) { return target_->Switch(move.agent, move.move, s); });
  report.switch_files = switch_stats.files_sent;
  report.switch_file_bytes = switch_stats.file_bytes_sent;
  report.removed = switch_stats.removed;
  if (Crash("switched")) return CrashStatus("switched");
  if (!switched.ok()) return Rollback(move, NameDamageHere(dir_, switched.WithContext("switch")));

  // The point of no return: once activate may have been sent, only the target's answer
  // decides between retiring and thawing.
  move.phase = "activate-sent";
  if (Status saved = SaveOutgoing(dir_, move); !saved.ok()) return Rollback(move, saved);
  if (Crash("activate-sent")) return CrashStatus("activate-sent");
  BeginPhase("activate");
  Status activated = target_->Activate(move.agent, move.move, move.epoch);
  report.frozen_seconds = SecondsSince(frozen_at);
  if (Crash("activated")) return CrashStatus("activated");
  if (!activated.ok()) {
    Result<bool> moved = Resolve(move, "activate's reply was lost (" + activated.message() + ")");
    if (!moved.ok()) return moved.status().WithContext("activate's reply was lost (" + activated.message() + ")");
    if (!*moved) {
      return Status::FailedPrecondition("move " + move.move, "the target did not take over (" + activated.message() +
                                                                 "), so the agent was thawed here");
    }
    return report;
  }
  CAPSULE_RETURN_IF_ERROR(local_.Retire(move.epoch - 1));
  CAPSULE_RETURN_IF_ERROR(RemoveOutgoing(dir_));
  return report;
}

Status Mover::Rollback(const OutgoingMove& move, Status why) {
  // A few tries: the target also drops the staging area on its next offer or restart.
  for (int attempt = 0; attempt < 3 && !target_->Abort(move.agent, move.move).ok(); ++attempt) {
  }
  Result<HolderRecord> record = HolderRecord::Load(dir_);
  if (record.ok() && record->state == HolderState::kFrozen) {
    Status thawed = local_.Thaw(move.move);
    if (!thawed.ok()) {
      if (why.ok()) return thawed.WithContext("rollback");
      return why.WithContext("rolled back, but thawing failed (" + thawed.message() + ")");
    }
  } else if (local_.mounted()) {
    (void)local_.Thaw(move.move);  // a freeze that failed half-way may have stopped the mount's writes
  }
  CAPSULE_RETURN_IF_ERROR(RemoveOutgoing(dir_));
  return why;
}

Result<bool> Mover::Resolve(const OutgoingMove& move, const std::string& why) {
  std::string last = "no answer";
  const int tries = std::max(1, options_.query_attempts);
  for (int attempt = 0; attempt < tries; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(options_.query_interval);
    if (options_.on_wait) {
      options_.on_wait("move " + move.move + ": " + why + "; asking " + move.to + " which epoch it holds of agent " +
                       move.agent + ", try " + std::to_string(attempt + 1) + " of " + std::to_string(tries) +
                       (attempt > 0 ? " (" + last + ")" : "") + "; the agent stays frozen here until it answers");
    }
    Result<QueryReply> reply = target_->Query(move.agent, move.move);
    if (!reply.ok()) {
      last = reply.status().message();
      continue;
    }
    // The target reached our epoch (or one past it: it took over and has moved the agent on
    // since): the move happened. The query fenced any move not activated, so a lower epoch
    // means it never will.
    if (reply->epoch >= move.epoch) {
      CAPSULE_RETURN_IF_ERROR(local_.Retire(move.epoch - 1));
      CAPSULE_RETURN_IF_ERROR(RemoveOutgoing(dir_));
      return true;
    }
    // It holds another epoch (or none): the move never happened, and the query made sure it
    // never will.
    CAPSULE_RETURN_IF_ERROR(local_.Thaw(move.move));
    CAPSULE_RETURN_IF_ERROR(RemoveOutgoing(dir_));
    return false;
  }
  return Status::Unavailable("move " + move.move, "the target cannot say whether it took over (" + last +
                                                      "); the agent stays frozen here until it can");
}

}  // namespace

bool IsSimulatedCrash(const Status& status) { return status.message().rfind(kCrashWhat, 0) == 0; }

Result<std::optional<OutgoingMove>> LoadOutgoingMove(const std::string& capsule_dir) {
  std::string path = JoinPath(capsule_dir, local::kOutgoingMove);
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(capsule_dir));
  Result<std::string> text = root.ReadFileBounded(local::kOutgoingMove, 1 << 20, "an outgoing move's record");
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return std::optional<OutgoingMove>();
    return text.status();
  }
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(*text, path, Code::kCorruption));
  if (!json.is_object() || !json.value("epoch", Json()).is_number_unsigned()) {
    return Status::Corruption(path, "needs agent, epoch, move, phase and to");
  }
  OutgoingMove move;
  move.agent = json.value("agent", "");
  move.epoch = json["epoch"];
  move.move = json.value("move", "");
  move.phase = json.value("phase", "");
  move.to = json.value("to", "");
  return std::optional<OutgoingMove>(move);
}

Result<ProcessLock> LockMovesOf(const std::string& dir) {
  // Made and opened beneath the folder: a link in the place of .capsule or the lock is refused.
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(dir));
  CAPSULE_RETURN_IF_ERROR(root.MakeDir(kLocalDir, 0700));
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, root.OpenFile(local::kMoveLock, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  return ProcessLock::Acquire(std::move(fd), root.PathOf(local::kMoveLock),
                              dir + ": a move of this agent is running here (it resolves itself)");
}

Result<MoveReport> RunMove(const std::string& source, TargetApi* target, const MoveOptions& options) {
  CAPSULE_ASSIGN_OR_RETURN(LocalCapsule local, LocalCapsule::Open(source));
  CAPSULE_ASSIGN_OR_RETURN(ProcessLock moving, LockMovesOf(local.dir()));
  CAPSULE_ASSIGN_OR_RETURN(std::optional<OutgoingMove> left, LoadOutgoingMove(local.dir()));
  if (left) {
    return Status::FailedPrecondition(local.dir(), "a move to " + left->to + " (" + left->move + ") is unresolved (" +
                                                       left->phase + "); run capsule move --recover first");
  }
  Mover mover(std::move(local), target, options);
  return mover.Run();
}

Status RecoverMove(const std::string& source, TargetApi* target, const MoveOptions& options) {
  CAPSULE_ASSIGN_OR_RETURN(LocalCapsule local, LocalCapsule::Open(source));
  std::string dir = local.dir();
  CAPSULE_ASSIGN_OR_RETURN(ProcessLock moving, LockMovesOf(dir));
  CAPSULE_ASSIGN_OR_RETURN(std::optional<OutgoingMove> left, LoadOutgoingMove(dir));
  if (!left) return Status::Ok();
  Mover mover(std::move(local), target, options);
  if (left->phase == "activate-sent") {
    return mover.Resolve(*left, "an earlier run sent activate and did not learn its outcome").status();
  }
  Status rolled = mover.Rollback(*left, Status::Ok());
  return rolled;
}

}  // namespace capsule::move
