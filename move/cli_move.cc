// capsule serve --root DIR --listen HOST:PORT --cert FILE --key FILE --ca FILE --seal-key FILE
//               [--mount-to DIR]
// capsule move SOURCE --to HOST:PORT --cert FILE --key FILE --ca FILE [--recover] [--json]
//              [--progress]
#include "move/cli_move.h"

#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <vector>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>

#include "capsule/cli.h"
#include "capsule/file_io.h"
#include "capsule/holder.h"
#include "capsule/keys.h"
#include "capsule/layout.h"
#include "capsule/mount_lock.h"
#include "fs/control_client.h"
#include "move/move_source.h"
#include "move/move_target.h"
#include "move/remote_target.h"
#include "move/tls_channel.h"
#include "move/tls_dialer.h"

namespace capsule::cli {

namespace {

using move::TlsDialer;
using move::TlsLink;

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

std::string RealPathOf(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return path;
  std::string result(real);
  std::free(real);
  return result;
}

// An offer for an agent whose retired copy this sidecar mounted at `mountpoint` (on an
// earlier activation): the mount takes no write any more, so it is unmounted and the offer
// goes on. A copy mounted anywhere else, or not retired, is left alone and the offer refused.
Status UnmountRetired(const std::string& dir, const std::string& mountpoint) {
  constexpr long kFuseSuperMagic = 0x65735546;
  struct statfs st;
  if (::statfs(mountpoint.c_str(), &st) != 0 || st.f_type != kFuseSuperMagic) {
    return Status::FailedPrecondition(dir, "its retired copy is mounted, not by this sidecar at " + mountpoint +
                                               "; unmount it first");
  }
  Result<std::string> socket = fs::FindControlSocket(mountpoint);
  Result<Json> status = socket.ok() ? fs::SendControl(*socket, "status") : Result<Json>(socket.status());
  if (!status.ok() || status->value("state", "") != "retired" ||
      RealPathOf(status->value("dir", "")) != RealPathOf(dir)) {
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

struct ServeArgs {
  std::string root, listen, cert, key, ca, seal_key, mount_to;
};

// Resolves the moves out of `root` that a previous run left mid-way, asking each one's
// target; those that cannot be resolved yet are retried every two seconds, forever (the agent
// stays frozen meanwhile: waiting costs availability, never correctness).
void ResolveOutgoing(const std::string& root, const move::TlsCredentials& credentials) {
  Result<std::vector<TreeEntry>> entries = ListTree(root, {".staging"});
  if (!entries.ok()) return;
  for (const TreeEntry& entry : *entries) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos ||
        entry.path[0] == '.') {
      continue;
    }
    std::string dir = JoinPath(root, entry.path);
    Result<std::optional<move::OutgoingMove>> left = move::LoadOutgoingMove(dir);
    if (!left.ok() || !left->has_value()) continue;
    std::string to = (*left)->to;
    std::thread([dir, to, credentials] {
      move::RemoteTarget target(to, TlsDialer(to, credentials));
      move::MoveOptions options;
      options.to = to;
      options.query_attempts = 1;
      for (;;) {
        Status resolved = move::RecoverMove(dir, &target, options);
        if (resolved.ok()) {
          std::cerr << "capsule: serve: resolved the move of " << dir << " to " << to << "\n";
          return;
        }
        std::cerr << "capsule: serve: " << resolved.message() << "; asking again\n";
        std::this_thread::sleep_for(std::chrono::seconds(2));
      }
    }).detach();
  }
}

int RunServe(const ServeArgs& args) {
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);  // every thread made from here on too

  move::TlsCredentials credentials{args.cert, args.key, args.ca};
  Result<EvpPkeyPtr> seal_key = LoadPrivateKey(args.seal_key, KeyType::kX25519);
  if (!seal_key.ok()) return Fail(seal_key.status().WithContext("--seal-key"));
  Result<std::string> seal_hex = PublicKeyHex(seal_key->get());
  if (!seal_hex.ok()) return Fail(seal_hex.status());
  Result<std::unique_ptr<move::MoveTarget>> target = move::MoveTarget::Open(args.root, std::move(*seal_key));
  if (!target.ok()) return Fail(target.status().WithContext("--root"));
  if (!args.mount_to.empty()) {
    (*target)->set_on_activated([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      Status mounted = MountCapsule(dir, JoinPath(mount_to, agent));
      if (!mounted.ok()) std::cerr << "capsule: serve: " << mounted.message() << "\n";
    });
    (*target)->set_release_retired([mount_to = args.mount_to](const std::string& agent, const std::string& dir) {
      return UnmountRetired(dir, JoinPath(mount_to, agent));
    });
  }
  Result<std::unique_ptr<move::TlsListener>> listener = move::TlsListener::Listen(args.listen, credentials);
  if (!listener.ok()) return Fail(listener.status().WithContext("--listen " + args.listen));
  std::string host = args.listen.substr(0, args.listen.rfind(':'));
  std::cout << "listening on " << host << ":" << (*listener)->port() << "\n"
            << "seal key " << *seal_hex << "\n"
            << std::flush;
  ResolveOutgoing(args.root, credentials);

  move::TlsListener* accepting = listener->get();
  std::atomic<bool> stopping{false};
  std::thread stopper([&] {
    int signal = 0;
    sigwait(&stop_signals, &signal);
    stopping = true;
    accepting->Shutdown();
  });
  stopper.detach();
  move::MoveTarget* serving = target->get();
  while (!stopping) {
    Result<std::unique_ptr<move::TlsConnection>> conn = accepting->Accept();
    if (!conn.ok()) {
      if (!stopping) std::cerr << "capsule: serve: " << conn.status().message() << "\n";
      continue;
    }
    (*conn)->set_timeout_seconds(move::kLinkTimeoutSeconds);
    std::thread([serving, link = std::make_shared<TlsLink>(std::move(*conn))] {
      Status served = move::ServeConnection(link.get(), serving);
      if (!served.ok()) std::cerr << "capsule: serve: " << link->peer() << ": " << served.message() << "\n";
    }).detach();
  }
  std::cout << std::flush;
  // Connections still open end with the process; every staging area is emptied on the next
  // start, and every holder record was written whole.
  ::_exit(kExitOk);
}

struct MoveArgs {
  std::string source, to, cert, key, ca;
  bool recover = false;
  bool json = false;
  bool progress = false;
};

std::string Mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

int RunMoveCommand(const MoveArgs& args) {
  ::signal(SIGPIPE, SIG_IGN);
  move::TlsCredentials credentials{args.cert, args.key, args.ca};
  move::RemoteTarget target(args.to, TlsDialer(args.to, credentials));
  move::MoveOptions options;
  options.to = args.to;
  // On a terminal one line rewritten in place; elsewhere (--progress) one line per report.
  bool terminal = ::isatty(STDERR_FILENO);
  if (terminal || args.progress) {
    options.progress = [terminal](const move::MoveProgress& p) {
      double rate = p.seconds > 0 ? static_cast<double>(p.bytes) / p.seconds : 0;
      std::fprintf(stderr, "%s%-8s %12s  %10s/s  %6.1f s", terminal ? "\r" : "", p.phase.c_str(),
                   Mib(p.bytes).c_str(), Mib(static_cast<uint64_t>(rate)).c_str(), p.seconds);
      if (!terminal || p.phase == "done") std::fprintf(stderr, "\n");
      std::fflush(stderr);
    };
  }
  if (args.recover) {
    Status resolved = move::RecoverMove(args.source, &target, options);
    if (!resolved.ok()) return Fail(resolved);
    std::cout << "resolved: no move of " << args.source << " is left unfinished\n";
    return kExitOk;
  }
  Result<move::MoveReport> report = move::RunMove(args.source, &target, options);
  if (!report.ok()) return Fail(report.status());
  if (args.json) {
    Json json = {{"agent", report->agent},
                 {"move", report->move},
                 {"epoch", report->epoch},
                 {"to", args.to},
                 {"copy_bytes", report->copy_bytes},
                 {"copy_files", report->copy_files},
                 {"copy_skipped", report->copy_skipped},
                 {"copy_seconds", report->copy_seconds},
                 {"preverify_seconds", report->preverify_seconds},
                 {"switch_bytes", report->switch_bytes},
                 {"switch_files", report->switch_files},
                 {"switch_file_bytes", report->switch_file_bytes},
                 {"removed", report->removed},
                 {"freeze_seconds", report->freeze_seconds},
                 {"frozen_seconds", report->frozen_seconds}};
    std::cout << json.dump() << "\n";
  } else {
    std::cout << "moved agent " << report->agent << " to " << args.to << " at epoch " << report->epoch << ": copy "
              << Mib(report->copy_bytes) << " (" << report->copy_files << " files sent, " << report->copy_skipped
              << " held the same), switch " << Mib(report->switch_bytes) << " (" << report->switch_files
              << " files), frozen " << static_cast<long>(report->frozen_seconds * 1000) << " ms\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterMoveCommands(CLI::App& app, int* exit_code) {
  auto serve_args = std::make_shared<ServeArgs>();
  CLI::App* serve = app.add_subcommand("serve", "The sidecar: receive moves into DIR over TLS 1.3; resolve moves left mid-way");
  serve->add_option("--root", serve_args->root, "Folder of capsules, one per agent id (ROOT/<agent-id>)")->required();
  serve->add_option("--listen", serve_args->listen, "HOST:PORT to listen on (PORT 0 picks one; the first line printed names it)")
      ->required();
  serve->add_option("--cert", serve_args->cert, "This sidecar's certificate (PEM)")->required();
  serve->add_option("--key", serve_args->key, "This sidecar's private key (PEM)")->required();
  serve->add_option("--ca", serve_args->ca, "CA certificate(s) a peer's certificate must chain to (PEM)")->required();
  serve->add_option("--seal-key", serve_args->seal_key, "X25519 private key switches are sealed to (capsule keygen --type x25519)")
      ->required();
  serve->add_option("--mount-to", serve_args->mount_to, "Mount each capsule this sidecar takes over at DIR/<agent-id> (capsulefs)");
  serve->footer("The protocol, its failure rules and recovery: man capsule-protocol.7");
  serve->callback([serve_args, exit_code] { *exit_code = RunServe(*serve_args); });

  auto move_args = std::make_shared<MoveArgs>();
  CLI::App* move = app.add_subcommand("move", "Move the agent at SOURCE to the sidecar at --to");
  move->add_option("SOURCE", move_args->source, "Capsule folder, or the mountpoint of one")->required();
  move->add_option("--to", move_args->to, "The target sidecar's HOST:PORT")->required();
  move->add_option("--cert", move_args->cert, "This machine's certificate (PEM)")->required();
  move->add_option("--key", move_args->key, "This machine's private key (PEM)")->required();
  move->add_option("--ca", move_args->ca, "CA certificate(s) the target's certificate must chain to (PEM)")->required();
  move->add_flag("--recover", move_args->recover,
                 "Only resolve the move SOURCE records as unfinished (ask the target; retire or thaw)");
  move->add_flag("--json", move_args->json, "Print the move's figures as JSON");
  move->add_flag("--progress", move_args->progress,
                 "Report progress (phase, bytes, rate) on standard error even when it is not a terminal");
  move->footer("Exit 0 only when the target holds the new epoch and SOURCE is retired. man capsule-protocol.7");
  move->callback([move_args, exit_code] { *exit_code = RunMoveCommand(*move_args); });
}

}  // namespace capsule::cli
