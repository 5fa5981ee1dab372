#include "move/sidecar.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/memory.h"
#include "capsule/base/metrics_server.h"
#include "capsule/base/mutex.h"
#include "capsule/base/process_lock.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/trust.h"
#include "fs/control_client.h"
#include "move/call_gate.h"
#include "move/door.h"
#include "move/move_source.h"
#include "move/move_target.h"
#include "move/net/tls_channel.h"
#include "move/remote_target.h"
#include "move/serve.h"
#include "move/service_notify.h"
#include "move/sidecar_state.h"
#include "move/tls_dialer.h"

namespace capsule::move {

namespace {

// How long a stop waits for the calls in progress to finish (capsule-sidecar.service gives
// the process 90 s before it is killed).
constexpr std::chrono::seconds kStopWait{60};

std::string ProgramBesideMe(const std::string& name) {
  char self[4096];
  ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0) {
    std::string beside = JoinPath(DirName(std::string(self, static_cast<size_t>(n))), name);
    if (::access(beside.c_str(), X_OK) == 0) return beside;
  }
  return name;  // from PATH
}

// Runs `program` with `args` and waits: its exit code, 128 when it did not exit normally.
Result<int> RunTool(const std::string& program, std::vector<std::string> args) {
  args.insert(args.begin(), program);
  std::vector<char*> argv;
  for (std::string& arg : args) argv.push_back(arg.data());
  argv.push_back(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) return Status::IOError("fork", errno);
  if (pid == 0) {
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

// capsulefs DIR MNT, which returns once the mount is ready (it daemonises). A mount that
// fails leaves no driver of DIR behind: activate then puts the folder back as it was.
Status MountCapsule(const std::string& dir, const std::string& mountpoint) {
  if (Status made = MakeDirectories(mountpoint); !made.ok()) {
    return made.WithContext("cannot mount " + dir + " at " + mountpoint);
  }
  CAPSULE_ASSIGN_OR_RETURN(int exit_code, RunTool(ProgramBesideMe("capsulefs"), {dir, mountpoint}));
  if (exit_code != 0) {
    CAPSULE_RETURN_IF_ERROR(WaitForDriverToExit(dir));
    return Status::IOError(mountpoint, "capsulefs " + dir + " did not mount (exit " + std::to_string(exit_code) + ")");
  }
  return Status::Ok();
}

// An offer for an agent whose retired copy this sidecar mounted at `mountpoint` (on an
// earlier activation): the mount takes no write any more, so it is unmounted and the offer
// goes on. A copy mounted anywhere else, or not retired, is left alone and the offer refused.
Status UnmountRetired(const std::string& dir, const std::string& mountpoint) {
  if (!fs::IsFuseMount(mountpoint)) {
    return Status::FailedPrecondition(dir, "its retired copy is mounted, not by this sidecar at " + mountpoint +
                                               "; unmount it first");
  }
  Result<std::string> socket = fs::FindControlSocket(mountpoint);
  Result<Json> status = socket.ok() ? fs::SendControl(*socket, "status") : Result<Json>(socket.status());
  std::string served = status.ok() ? RealPath(StringField(*status, "dir").value_or("")) : "";
  if (!status.ok() || StringField(*status, "state").value_or("") != "retired" || served.empty() ||
      served != RealPath(dir)) {
    return Status::FailedPrecondition(dir, "its retired copy is mounted, not by this sidecar at " + mountpoint +
                                               "; unmount it first");
  }
  CAPSULE_ASSIGN_OR_RETURN(int exit_code, RunTool("fusermount3", {"-u", mountpoint}));
  if (exit_code != 0) {
    return Status::FailedPrecondition(mountpoint, "fusermount3 -u failed (exit " + std::to_string(exit_code) +
                                                      "): the retired copy is busy; unmount it first");
  }
  return WaitForDriverToExit(dir);
}

// Resolves the moves out of `root` that a previous run left mid-way, asking each one's
// target; those that cannot be resolved yet are retried every two seconds, forever (the agent
// stays frozen meanwhile: waiting costs availability, never correctness).
void ResolveOutgoing(const std::string& root, const TlsCredentials& credentials, SidecarState* log) {
  Result<std::vector<TreeEntry>> entries = ListTree(root, {kStagingDir});
  if (!entries.ok()) return;
  for (const TreeEntry& entry : *entries) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos ||
        entry.path[0] == '.') {
      continue;
    }
    std::string dir = JoinPath(root, entry.path);
    Result<std::optional<OutgoingMove>> left = LoadOutgoingMove(dir);
    if (!left.ok() || !left->has_value()) continue;
    std::string to = (*left)->to;
    log->metrics().moves_stuck().Add(1);
    std::thread([dir, to, credentials, log, agent = (*left)->agent, move = (*left)->move] {
      RemoteTarget target(to, TlsDialer(to, credentials));
      MoveOptions options;
      options.to = to;
      options.query_attempts = 1;
      for (;;) {
        Status resolved = RecoverMove(dir, &target, options);
        if (resolved.ok()) {
          log->metrics().moves_stuck().Add(-1);
          log->Note("recovered", "move-out agent=" + agent + " move=" + move + " to=" + to +
                                     ": the move left mid-way by an earlier run is resolved");
          return;
        }
        std::cerr << "capsule: serve: " << resolved.message() << "; asking again\n";
        std::this_thread::sleep_for(std::chrono::seconds(2));
      }
    }).detach();
  }
}

// What the connection threads use. They hold it with shared ownership: a stop may leave some
// running (a handshake, a call past kStopWait) after RunSidecar returns, and what they use is
// destroyed only when the last of them ends.
struct Serving {
  std::unique_ptr<TlsListener> listener;
  std::unique_ptr<MoveTarget> target;
  std::unique_ptr<SidecarState> log;
  CallGate gate;
  std::unique_ptr<Door> door;  // after the target: a pass is given back before the door goes
};

// One connection the door let in, on a thread of its own: its handshake, by the door's
// deadline (or until the door gives its place to another), then its calls. Its pass is
// given back when the connection closes.
void ServeAdmitted(std::shared_ptr<Serving> serving, AcceptedSocket socket, std::unique_ptr<DoorPass> pass,
                   int handshake_timeout_seconds) {
  SidecarState* log = serving->log.get();
  const std::string address = socket.address;
  log->metrics().handshakes().Add(1);
  Result<std::unique_ptr<TlsConnection>> conn = serving->listener->Handshake(
      std::move(socket), handshake_timeout_seconds, pass->wake_fd(), "dropped by this end");
  log->metrics().handshakes().Add(-1);
  if (!conn.ok()) {
    const std::string dropped = pass->dropped_why();
    if (!dropped.empty()) {
      log->LogDoor("dropped", "handshake", address, dropped);
    } else {
      const bool refused = conn.status().code() == Code::kPermissionDenied;
      log->LogDoor(refused ? "refused" : "dropped", "handshake", address, conn.status().message(),
                   conn.status().code());
    }
    pass.reset();  // before `serving` may go
    return;
  }
  pass->Authenticated();
  (*conn)->set_timeout_seconds(kLinkTimeoutSeconds);
  {
    TlsLink link(std::move(*conn));
    GatedTarget gated(serving->target.get(), &serving->gate);
    LoggedTarget logged(&gated, log, link.peer(), link.peer_name());
    Status served = ServeConnection(&link, &logged);
    if (!served.ok()) log->LogDoor("failed", "connection", link.peer(), served.message());
  }
  pass.reset();  // before `serving` may go
}

// Rolls back, until it is destroyed, every move in flight whose source has said nothing for
// longer than the limit (MoveTarget::DropSilent), logging each. The target and the log
// outlive it.
class SilentMoveDropper {
 public:
  SilentMoveDropper(MoveTarget* target, SidecarState* log, std::chrono::milliseconds silence)
      : thread_([this, target, log, silence] { Run(target, log, silence); }) {}
  ~SilentMoveDropper() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void Run(MoveTarget* target, SidecarState* log, std::chrono::milliseconds silence) {
    const auto every = std::clamp<std::chrono::milliseconds>(silence / 4, std::chrono::milliseconds(50),
                                                             std::chrono::seconds(5));
    for (;;) {
      {
        std::unique_lock lock(mu_);
        if (wake_.wait_for(lock, every, [&]() REQUIRES(mu_) { return stop_; })) return;
      }
      for (const DroppedMove& gone : target->DropSilent()) {
        log->Log("expired", gone.phase, gone.agent, gone.move, gone.epoch, gone.source,
                 "no word from the source for " + std::to_string(silence.count() / 1000) +
                     " s (--staging-timeout): rolled back, its staging area removed");
        log->SetPhase(gone.agent, gone.move, gone.epoch, gone.source, "");
      }
    }
  }

  Mutex mu_;
  std::condition_variable wake_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it starts once the rest is made
};

// The agents held in `root` are trusted before any is served (capsule/format/trust.h): the
// first one edited behind its manifest refuses the start, naming it and each file. A mounted
// one was checked by its mount.
Status CheckAgentsTrusted(const std::string& root) {
  Result<std::vector<TreeEntry>> entries = ListTree(root, {kStagingDir});
  if (!entries.ok()) return Status::Ok();  // a new root: nothing held yet
  for (const TreeEntry& entry : *entries) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos ||
        entry.path[0] == '.') {
      continue;
    }
    const std::string dir = JoinPath(root, entry.path);
    if (!PathExists(JoinPath(dir, kManifestPath))) continue;
    Result<UniqueFd> at_rest = LockForMount(dir);
    if (!at_rest.ok()) continue;  // mounted: its mount vouches for it
    CAPSULE_RETURN_IF_ERROR(CheckTrusted(dir).WithContext("agent " + entry.path));
  }
  return Status::Ok();
}

// A stop: no call begins any more (`gate` closed with the signal); those in progress are
// given kStopWait to finish, then every move in that did not activate is rolled back (its
// staging area emptied, logged as an abort), so that none is left half done. Calls still
// running past the wait are left to end with the process: the next start empties what they
// staged (MoveTarget::Open).
void FinishStop(MoveTarget* target, CallGate* gate, SidecarState* log, ServiceNotifier* notifier) {
  const int running = gate->running();
  if (running > 0) {
    const std::string waiting = std::to_string(running) + " call(s) in progress; waiting for them to finish (" +
                                std::to_string(kStopWait.count()) + " s at most)";
    log->Note("stopping", waiting);
    notifier->Status("stopping: " + waiting);
  }
  if (!gate->WaitIdle(std::chrono::steady_clock::now() + kStopWait)) {
    log->Note("stopped", std::to_string(gate->running()) + " call(s) still running after " +
                             std::to_string(kStopWait.count()) + " s: the next start empties what they staged");
    return;
  }
  // No call runs and none can begin.
  const std::vector<std::pair<std::string, std::string>> pending = target->PendingMoves();
  LoggedTarget stop(target, log, "stop");
  for (const auto& [agent, move] : pending) (void)stop.Abort(agent, move);
  log->Note("stopped", std::to_string(pending.size()) + " move(s) in rolled back; no call in progress");
}

// "HOST:PORT" with the port `port` was given (0 picks one).
std::string MetricsAddress(const std::string& given, uint16_t port) {
  return given.substr(0, given.rfind(':')) + ":" + std::to_string(port);
}

// The numbers of `log` served on `address` (nothing when empty): a port of their own, never
// the TLS port `tls_port`.
Result<std::unique_ptr<MetricsServer>> StartMetrics(const std::string& address, uint16_t tls_port, SidecarState* log) {
  if (address.empty()) return std::unique_ptr<MetricsServer>();
  const std::string port = address.substr(address.rfind(':') + 1);
  if (port == std::to_string(tls_port)) {
    return Status::InvalidArgument("--metrics " + address,
                                   "the port --listen serves TLS on; the numbers need a port of their own");
  }
  Result<std::unique_ptr<MetricsServer>> server = MetricsServer::Start(address, &log->registry());
  if (!server.ok()) return server.status().WithContext("--metrics " + address);
  return server;
}

}  // namespace

Status RunSidecar(const SidecarOptions& args) {
  ReturnLargeBlocksAtOnce();  // a long-lived process (capsule/base/memory.h)
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // every thread made from here on too

  if (Status limits = args.door.Check(); !limits.ok()) return limits;
  TlsCredentials credentials{args.cert, args.key, args.ca};
  Result<EvpPkeyPtr> seal_key = LoadPrivateKey(args.seal_key, KeyType::kX25519);
  if (!seal_key.ok()) return seal_key.status().WithContext("--seal-key");
  Result<std::string> seal_hex = PublicKeyHex(seal_key->get());
  if (!seal_hex.ok()) return seal_hex.status();
  // The address and the TLS identity are checked before the root is made: a sidecar that
  // cannot start leaves no folder behind.
  Result<std::unique_ptr<TlsListener>> listener = TlsListener::Listen(args.listen, credentials);
  if (!listener.ok()) return listener.status().WithContext("--listen " + args.listen);
  std::string host = args.listen.substr(0, args.listen.rfind(':'));
  std::string address = host + ":" + std::to_string((*listener)->port());
  auto serving = std::make_shared<Serving>();
  serving->log = std::make_unique<SidecarState>(args.root, address, stderr, LogSinkFor(args.log_json, stderr));
  SidecarState* log = serving->log.get();
  Result<std::unique_ptr<MetricsServer>> metrics = StartMetrics(args.metrics, (*listener)->port(), log);
  if (!metrics.ok()) return metrics.status();
  // One sidecar per root: a second would empty the staging area under the first's moves.
  if (Status made = MakeDirectories(args.root); !made.ok()) return made.WithContext("--root");
  Result<ProcessLock> serving_root =
      ProcessLock::Acquire(JoinPath(args.root, kSidecarLock), "--root " + args.root + ": another capsule serve serves it");
  if (!serving_root.ok()) return serving_root.status();
  if (Status trusted = CheckAgentsTrusted(args.root); !trusted.ok()) return trusted.WithContext("--root");
  // Moves in left mid-way by an earlier run: MoveTarget::Open empties their staging areas.
  std::vector<std::string> left_staged;
  if (Result<std::vector<TreeEntry>> staged = ListTree(JoinPath(args.root, kStagingDir)); staged.ok()) {
    for (const TreeEntry& entry : *staged) {
      if (entry.type == TreeEntry::Type::kDirectory && entry.path.find('/') == std::string::npos &&
          entry.path[0] != '.') {  // .replaced-<move>: a copy an activation replaced, not a move
        left_staged.push_back(entry.path);
      }
    }
  }
  Result<std::unique_ptr<MoveTarget>> target = MoveTarget::Open(args.root, std::move(*seal_key));
  if (!target.ok()) return target.status().WithContext("--root");
  if (!args.sandbox_cache.empty()) (*target)->set_sandbox_cache(args.sandbox_cache);
  (*target)->set_staging_limits(args.staging);
  if (!args.mount_to.empty()) {
    // Activate means running: the agent is mounted before activate is answered, and a mount
    // that fails refuses the activate (the source keeps the agent).
    (*target)->set_start_agent([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      return MountCapsule(dir, JoinPath(mount_to, agent));
    });
    (*target)->set_release_retired([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      return UnmountRetired(dir, JoinPath(mount_to, agent));
    });
  }
  serving->listener = std::move(*listener);
  serving->target = std::move(*target);
  serving->door = std::make_unique<Door>(args.door);
  if (Status saved = log->Save(); !saved.ok()) return saved;
  for (const std::string& agent : left_staged) {
    log->Note("recovered", "move-in agent=" + agent + ": the staging area an earlier run left mid-way is emptied");
  }
  std::unique_ptr<fleet::FleetMember> member;
  if (!args.fleet.url.empty()) {
    Result<std::unique_ptr<fleet::FleetMember>> joined = JoinFleet(args.fleet, args.root, address, serving->target.get(), log);
    if (!joined.ok()) return joined.status();
    member = std::move(*joined);
  }
  std::cout << "listening on " << address << "\n"
            << "seal key " << *seal_hex << "\n";
  if (*metrics) std::cout << "metrics on " << MetricsAddress(args.metrics, (*metrics)->port()) << "\n";
  std::cout << std::flush;
  ServiceNotifier notifier;  // systemd's, when it runs the sidecar (Type=notify)
  notifier.Ready("listening on " + address);
  ResolveOutgoing(args.root, credentials, log);
  SilentMoveDropper dropper(serving->target.get(), log, args.staging.silence);

  TlsListener* accepting = serving->listener.get();
  CallGate* calls = &serving->gate;
  std::atomic<bool> stopping{false};
  std::thread stopper([&, accepting, calls] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    calls->Close();
    notifier.Stopping("stopping: no new call; the calls in progress finish, the moves in roll back");
    stopping = true;
    accepting->Shutdown();
  });
  // This loop only accepts and admits: every handshake runs on its connection's thread, so no
  // peer, however slow, holds the door for another.
  while (!stopping) {
    // The watchdog is pinged here, as the loop turns: a loop stuck anywhere misses its pings.
    notifier.Alive();
    if (!accepting->WaitForConnection(notifier.AliveEveryMillis())) continue;
    Result<AcceptedSocket> socket = accepting->AcceptSocket();
    if (!socket.ok()) {
      if (stopping) break;
      std::cerr << "capsule: serve: " << socket.status().message() << "\n";
      // Out of file descriptors, say: wait for connections to close rather than spin.
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const std::string address = socket->address;
    Result<std::unique_ptr<DoorPass>> pass = serving->door->Admit(socket->host);
    if (!pass.ok()) {
      log->LogDoor("refused", "connection", address, pass.status().message(), pass.status().code());
      continue;  // the socket closes here
    }
    try {
      std::thread(ServeAdmitted, serving, std::move(*socket), std::move(*pass), args.door.handshake_timeout_seconds)
          .detach();
    } catch (const std::system_error& e) {
      log->LogDoor("refused", "connection", address, std::string("no thread to serve it: ") + e.what(),
                   Code::kUnavailable);
    }
  }
  stopper.join();
  FinishStop(serving->target.get(), calls, log, &notifier);
  // Connection threads still running keep `serving` (the target, the log, the door) alive. The
  // lease's thread runs until the process ends, with the target and the log it was given: it
  // keeps them too.
  if (member) {
    // Reachable from a static (no leak report) and never destroyed.
    [[maybe_unused]] static auto* const kept_for_lease = new std::shared_ptr<Serving>(serving);
    (void)member.release();
  }
  return Status::Ok();
}

}  // namespace capsule::move
