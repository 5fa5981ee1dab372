// capsule serve --root DIR --listen HOST:PORT --cert FILE --key FILE --ca FILE --seal-key FILE
//               [--mount-to DIR] [--sandbox-cache DIR] [--handshake-timeout S]
//               [--max-connections N] [--max-connections-per-peer N] [--max-handshakes N]
//               [--max-handshakes-per-peer N] [--staging-timeout S] [--max-moves-per-source N]
// capsule move SOURCE --to HOST:PORT|NAME --cert FILE --key FILE --ca FILE [--fleet URL] [--recover] [--json]
//              [--progress] [--query-tries N] [--query-timeout S]
#include "capsule/cli/cli.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <vector>
#include <cstdio>
#include <iostream>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "capsule/format/keys.h"
#include "capsule/format/layout.h"
#include "capsule/format/mount_lock.h"
#include "fs/control_client.h"
#include "move/fleet_target.h"
#include "move/move_source.h"
#include "move/net/tls_channel.h"
#include "move/remote_target.h"
#include "move/sidecar.h"
#include "move/sidecar_state.h"
#include "move/tls_dialer.h"

namespace capsule::cli {

namespace {

using move::TlsDialer;

struct MoveArgs {
  std::string source, to, cert, key, ca;
  bool recover = false;
  int query_tries = 20;
  int query_timeout = 10;  // seconds
  bool accept_edits = false;
  FleetFlags fleet;  // with a url, --to names a sidecar in the fleet's registry
};

std::string Mib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

int RunMoveCommand(const MoveArgs& args) {
  ::signal(SIGPIPE, SIG_IGN);
  if (args.accept_edits && !args.recover) {
    Result<std::string> dir = ResolveCapsule(args.source);
    if (!dir.ok()) return Fail(dir.status());
    if (Status accepted = AcceptEditsFirst(*dir); !accepted.ok()) return Fail(accepted);
  }
  move::TlsCredentials credentials{args.cert, args.key, args.ca};
  std::string to = args.to;
  std::shared_ptr<fleet::EtcdClient> etcd;
  if (!args.fleet.url.empty()) {
    Result<std::string> address = ResolveSidecar(args.fleet, args.to, &etcd);
    if (!address.ok()) return Fail(address.status());
    to = *address;
  }
  move::RemoteTarget remote(to, TlsDialer(to, credentials));
  remote.set_query_timeout(std::chrono::seconds(args.query_timeout));
  move::FleetTarget in_fleet(&remote, etcd, args.to);
  move::TargetApi& target = etcd ? static_cast<move::TargetApi&>(in_fleet) : remote;
  move::MoveOptions options;
  options.to = to;
  options.query_attempts = args.query_tries;
  // While it waits for the target to say whether it took over, the operator sees why the agent
  // is frozen, a line per query.
  options.on_wait = [](const std::string& waiting) { std::cerr << "capsule: " << move::PeerWords(waiting) << "\n"; };
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  options.progress = progress.get();
  if (args.recover) {
    Result<std::optional<move::OutgoingMove>> left = move::LoadOutgoingMove(args.source);
    if (left.ok() && left->has_value()) in_fleet.set_epoch((*left)->epoch);
    Status resolved = move::RecoverMove(args.source, &target, options);
    if (!resolved.ok()) return progress.reset(), Fail(resolved);
    if (progress) progress->Finish();
    if (JsonOutput()) return PrintJson({{"resolved", args.source}});
    std::cout << "resolved: no move of " << args.source << " is left unfinished\n";
    return kExitOk;
  }
  Result<move::MoveReport> report = move::RunMove(args.source, &target, options);
  if (!report.ok()) return progress.reset(), Fail(report.status());
  if (progress) progress->Finish();
  if (JsonOutput()) {
    Json json = {{"agent", report->agent},
                 {"move", report->move},
                 {"epoch", report->epoch},
                 {"to", to},
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
    std::cout << JsonText(json) << "\n";
  } else {
    std::cout << "moved agent " << report->agent << " to " << (etcd ? args.to + " (" + to + ")" : to) << " at epoch " << report->epoch << ": copy "
              << Mib(report->copy_bytes) << " (" << report->copy_files << " files sent, " << report->copy_skipped
              << " held the same), switch " << Mib(report->switch_bytes) << " (" << report->switch_files
              << " files), frozen " << static_cast<long>(report->frozen_seconds * 1000) << " ms\n";
  }
  return kExitOk;
}

int RunSidecarStatus(const std::string& root) {
  Result<move::SidecarStatus> status = move::ReadSidecarStatus(root);
  if (!status.ok()) return Fail(status.status());
  if (JsonOutput()) return PrintJson(move::SidecarStatusToJson(*status));
  // What a peer or the state file says is printed escaped (move::PeerWords): nothing there
  // moves the terminal's cursor or forges a line.
  using move::PeerWords;
  if (status->running) {
    std::cout << "sidecar running (pid " << status->pid << ") on " << PeerWords(status->listen) << " since "
              << PeerWords(status->started) << ", root " << root << "\n";
  } else {
    std::cout << "sidecar not running, root " << root << "\n";
  }
  if (!status->fleet_url.empty()) {
    std::cout << "fleet " << PeerWords(status->fleet_url) << " as " << PeerWords(status->fleet_name) << ", lease "
              << PeerWords(status->fleet_lease) << " (ttl " << status->fleet_ttl << " s)\n";
  }
  std::cout << "agents: " << status->agents.size() << "\n";
  for (const move::SidecarStatus::Agent& a : status->agents) {
    std::cout << "  " << PeerWords(a.agent) << "\tepoch " << a.epoch << "\t" << a.state << "\n";
  }
  std::cout << "moves in flight: " << status->moves.size() << "\n";
  for (const move::MoveInFlight& m : status->moves) {
    std::cout << "  " << m.direction << "\t" << PeerWords(m.agent) << "\t" << (m.move.empty() ? "-" : PeerWords(m.move))
              << "\tepoch " << m.epoch << "\t" << PeerWords(m.phase)
              << (m.peer.empty() ? "" : (m.direction == "in" ? "\tfrom " : "\tto ") + PeerWords(m.peer)) << "\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterMoveCommands(CLI::App& app, int* exit_code) {
  auto serve_args = std::make_shared<move::SidecarOptions>();
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
  serve->add_option("--sandbox-cache", serve_args->sandbox_cache,
                    "Build each arriving agent's sandbox in this cache (or find it there) before its move can activate; "
                    "a sandbox that cannot be built refuses the move");
  serve->add_option("--metrics", serve_args->metrics,
                    "HOST:PORT to serve the sidecar's numbers on, for Prometheus (plain HTTP, GET /metrics; a port of "
                    "its own, e.g. 127.0.0.1:9420; PORT 0 picks one)");
  auto log_format = std::make_shared<std::string>("text");
  serve->add_option("--log-format", *log_format,
                    "Log lines as text (TIME serve: EVENT CALL key=value...) or json (one object a line); under "
                    "systemd each line also carries its priority for journald (default text)")
      ->check(CLI::IsMember({"text", "json"}));
  move::DoorLimits& door = serve_args->door;
  serve->add_option("--handshake-timeout", door.handshake_timeout_seconds,
                    "Seconds a peer has to complete its TLS handshake (default " +
                        std::to_string(door.handshake_timeout_seconds) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--max-connections", door.max_connections,
                    "Connections open at once, in all (default " + std::to_string(door.max_connections) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--max-connections-per-peer", door.max_connections_per_peer,
                    "Connections open at once from one address (default " +
                        std::to_string(door.max_connections_per_peer) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--max-handshakes", door.max_handshakes,
                    "TLS handshakes in progress at once, in all; past it a new one takes the place of the oldest "
                    "of the peer with the most (default " + std::to_string(door.max_handshakes) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--max-handshakes-per-peer", door.max_handshakes_per_peer,
                    "TLS handshakes in progress at once from one address; past it a new one takes the place of its "
                    "oldest (default " + std::to_string(door.max_handshakes_per_peer) + ")")
      ->check(PositiveWholeNumber());
  auto staging_timeout = std::make_shared<int>(
      static_cast<int>(std::chrono::duration_cast<std::chrono::seconds>(serve_args->staging.silence).count()));
  serve->add_option("--staging-timeout", *staging_timeout,
                    "Seconds a move in flight may go without a word from its source before it is rolled back and "
                    "its staging area removed (default " + std::to_string(*staging_timeout) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--max-moves-per-source", serve_args->staging.max_moves_per_source,
                    "Moves in flight at once from one source (its certificate's name); past it an offer is refused "
                    "(default " + std::to_string(serve_args->staging.max_moves_per_source) + ")")
      ->check(PositiveWholeNumber());
  move::FleetArgs& fleet = serve_args->fleet;
  serve->add_option("--fleet", fleet.url,
                    "Join the fleet's registry at etcd://HOST:PORT[,HOST:PORT...]: activate claims the holder of "
                    "record, a lease keeps this sidecar live (needs --fleet-name)");
  serve->add_option("--fleet-name", fleet.name, "This sidecar's name in the fleet (letters, digits, '.', '_', '-')");
  serve->add_option("--fleet-ttl", fleet.ttl_seconds,
                    "Seconds of the sidecar's lease: lost, its agents turn read-only within 2/3 of it (default " +
                        std::to_string(fleet.ttl_seconds) + ")")
      ->check(PositiveWholeNumber());
  serve->add_option("--fleet-cacert", fleet.cacert, "CA certificate etcd's must chain to: HTTPS to etcd (PEM)");
  serve->add_option("--fleet-cert", fleet.cert, "Client certificate for etcd (PEM; with --fleet-cacert)");
  serve->add_option("--fleet-key", fleet.key, "Client certificate's private key for etcd (PEM)");
  serve->footer("The protocol, its failure rules and recovery, the door's limits, the fleet: man capsule-protocol.7");
  serve->callback([serve_args, staging_timeout, log_format, exit_code] {
    serve_args->staging.silence = std::chrono::seconds(*staging_timeout);
    serve_args->log_json = *log_format == "json";
    // The folders it makes lie outside every capsule (a mount's files/ excepted).
    for (const auto& [what, path] : {std::pair<const char*, const std::string&>{"--root", serve_args->root},
                                     {"--mount-to", serve_args->mount_to},
                                     {"--sandbox-cache", serve_args->sandbox_cache}}) {
      if (path.empty()) continue;
      if (Status outside = CheckOutsideCapsules(what, path); !outside.ok()) {
        *exit_code = Fail(outside);
        return;
      }
    }
    Status stopped = move::RunSidecar(*serve_args);
    if (!stopped.ok()) {
      *exit_code = Fail(stopped);
      return;
    }
    // Connections still open end with the process; every staging area is emptied on the next
    // start, and every holder record was written whole.
    std::cout << std::flush;
    ::_exit(kExitOk);
  });

  CLI::App* sidecar = app.add_subcommand("sidecar", "Ask about the sidecar serving a root folder: sidecar status");
  sidecar->require_subcommand(1);
  auto status_root = std::make_shared<std::string>();
  CLI::App* status = sidecar->add_subcommand(
      "status", "The sidecar serving --root: running or not, the agents held there with epoch and state, the moves in flight with their phase");
  status->add_option("--root", *status_root, "The sidecar's root folder (capsule serve --root)")->required();
  AddJsonFlag(status, "Print the status as JSON (an error as JSON)");
  status->footer("Read from ROOT/.sidecar.json and each capsule's holder record; no connection is made.\n"
                 "The log lines of capsule serve: man capsule-protocol.7, THE SIDECAR'S LOG AND STATUS");
  status->callback([status_root, exit_code] { *exit_code = RunSidecarStatus(*status_root); });

  auto move_args = std::make_shared<MoveArgs>();
  CLI::App* move = app.add_subcommand("move", "Move the agent at SOURCE to the sidecar at --to");
  move->add_option("SOURCE", move_args->source, "Capsule folder, or the mountpoint of one")->required();
  move->add_option("--to", move_args->to, "The target sidecar's HOST:PORT (with --fleet: its name in the fleet)")
      ->required();
  move->add_option("--cert", move_args->cert, "This machine's certificate (PEM)")->required();
  move->add_option("--key", move_args->key, "This machine's private key (PEM)")->required();
  move->add_option("--ca", move_args->ca, "CA certificate(s) the target's certificate must chain to (PEM)")->required();
  move->add_flag("--accept-edits", move_args->accept_edits,
                 "Take files edited behind the manifest on purpose first, as capsule accept does (journal: edits_accepted)");
  move->add_flag("--recover", move_args->recover,
                 "Only resolve the move SOURCE records as unfinished (ask the target; retire or thaw)");
  move->add_option("--query-tries", move_args->query_tries,
                   "When activate's reply is lost: how many times to ask the target which epoch it holds, half a "
                   "second apart, before giving up with the agent still frozen (default 20)")
      ->check(PositiveWholeNumber());
  move->add_option("--query-timeout", move_args->query_timeout,
                   "Seconds each such query may take to connect, and then to be answered (default 10)")
      ->check(PositiveWholeNumber());
  AddFleetOptions(move, &move_args->fleet, false);
  AddJsonFlag(move, "Print the move's figures as JSON (an error as JSON)");
  AddProgressFlag(move);
  move->footer("Exit 0 only when the target holds the new epoch and SOURCE is retired. man capsule-protocol.7");
  move->callback([move_args, exit_code] { *exit_code = RunMoveCommand(*move_args); });
}

}  // namespace capsule::cli
