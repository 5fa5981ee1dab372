#include "move/sidecar.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <thread>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/memory.h"
#include "capsule/base/process_lock.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/trust.h"
#include "fs/control_client.h"
#include "move/move_source.h"
#include "move/move_target.h"
#include "move/net/tls_channel.h"
#include "move/remote_target.h"
#include "move/serve.h"
#include "move/sidecar_state.h"
#include "move/tls_dialer.h"

namespace capsule::move {

namespace {

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

// capsulefs DIR MNT, which returns once the mount is ready (it daemonises).
Status MountCapsule(const std::string& dir, const std::string& mountpoint) {
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(mountpoint));
  CAPSULE_ASSIGN_OR_RETURN(int exit_code, RunTool(ProgramBesideMe("capsulefs"), {dir, mountpoint}));
  if (exit_code != 0) {
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
    std::thread([dir, to, credentials, log, agent = (*left)->agent, move = (*left)->move] {
      RemoteTarget target(to, TlsDialer(to, credentials));
      MoveOptions options;
      options.to = to;
      options.query_attempts = 1;
      for (;;) {
        Status resolved = RecoverMove(dir, &target, options);
        if (resolved.ok()) {
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

}  // namespace

Status RunSidecar(const SidecarOptions& args) {
  ReturnLargeBlocksAtOnce();  // a long-lived process (capsule/base/memory.h)
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // every thread made from here on too

  TlsCredentials credentials{args.cert, args.key, args.ca};
  Result<EvpPkeyPtr> seal_key = LoadPrivateKey(args.seal_key, KeyType::kX25519);
  if (!seal_key.ok()) return seal_key.status().WithContext("--seal-key");
  Result<std::string> seal_hex = PublicKeyHex(seal_key->get());
  if (!seal_hex.ok()) return seal_hex.status();
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
  if (!args.mount_to.empty()) {
    (*target)->set_on_activated([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      Status mounted = MountCapsule(dir, JoinPath(mount_to, agent));
      if (!mounted.ok()) std::cerr << "capsule: serve: " << mounted.message() << "\n";
    });
    (*target)->set_release_retired([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      return UnmountRetired(dir, JoinPath(mount_to, agent));
    });
  }
  Result<std::unique_ptr<TlsListener>> listener = TlsListener::Listen(args.listen, credentials);
  if (!listener.ok()) return listener.status().WithContext("--listen " + args.listen);
  std::string host = args.listen.substr(0, args.listen.rfind(':'));
  std::string address = host + ":" + std::to_string((*listener)->port());
  auto log = std::make_unique<SidecarState>(args.root, address, stderr);  // lives as long as the process
  if (Status saved = log->Save(); !saved.ok()) return saved;
  for (const std::string& agent : left_staged) {
    log->Note("recovered", "move-in agent=" + agent + ": the staging area an earlier run left mid-way is emptied");
  }
  std::cout << "listening on " << address << "\n"
            << "seal key " << *seal_hex << "\n"
            << std::flush;
  ResolveOutgoing(args.root, credentials, log.get());

  TlsListener* accepting = listener->get();
  std::atomic<bool> stopping{false};
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    stopping = true;
    accepting->Shutdown();
  });
  stopper.detach();
  MoveTarget* serving = target->get();
  while (!stopping) {
    Result<std::unique_ptr<TlsConnection>> conn = accepting->Accept();
    if (!conn.ok()) {
      if (!stopping) std::cerr << "capsule: serve: " << conn.status().message() << "\n";
      continue;
    }
    (*conn)->set_timeout_seconds(kLinkTimeoutSeconds);
    std::thread([serving, state = log.get(), link = std::make_shared<TlsLink>(std::move(*conn))] {
      LoggedTarget logged(serving, state, link->peer());
      Status served = ServeConnection(link.get(), &logged);
      if (!served.ok()) std::cerr << "capsule: serve: " << link->peer() << ": " << served.message() << "\n";
    }).detach();
  }
  (void)log.release();  // connection threads still running may log until the process ends
  return Status::Ok();
}

}  // namespace capsule::move
