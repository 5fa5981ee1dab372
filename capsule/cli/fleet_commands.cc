// capsule fleet ls|where AGENT|sidecars|retire AGENT --fleet URL [--fleet-cacert FILE
//               --fleet-cert FILE --fleet-key FILE] [--json]
// capsule fleet drain SIDECAR --from DIR --cert FILE --key FILE --ca FILE --fleet URL [--json]
// and the --fleet options of init, adopt and move (cli.h: AddFleetOptions). The registry's
// keys and transactions: man capsule-protocol.7, FLEET.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <thread>

#include "capsule/cli/cli.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/base/file_io.h"
#include "move/fleet/registry.h"
#include "move/fleet_target.h"
#include "move/move_source.h"
#include "move/remote_target.h"
#include "move/tls_dialer.h"
#include "move/sidecar_fleet.h"
#include "move/net/wire.h"
#include "move/sidecar_state.h"

namespace capsule::cli {

namespace {

Result<fleet::EtcdClient> OpenFleet(const FleetFlags& flags) {
  CAPSULE_ASSIGN_OR_RETURN(fleet::FleetOptions options,
                           move::FleetClientOptions(flags.url, flags.cacert, flags.cert, flags.key));
  return fleet::EtcdClient(options);
}

std::string LeaseHex(int64_t lease) {
  char hex[32];
  std::snprintf(hex, sizeof hex, "%llx", static_cast<unsigned long long>(lease));
  return hex;
}

Json HolderToJson(const fleet::HolderOfRecord& record, bool live) {
  return {{"agent", record.agent}, {"sidecar", record.sidecar}, {"epoch", record.epoch},
          {"state", record.state},  {"live", live},                {"revision", record.mod_revision}};
}

int RunFleetList(const FleetFlags& flags) {
  Result<fleet::EtcdClient> etcd = OpenFleet(flags);
  if (!etcd.ok()) return Fail(etcd.status());
  Result<std::vector<fleet::HolderOfRecord>> holders = fleet::ListHolders(*etcd);
  if (!holders.ok()) return Fail(holders.status());
  Result<std::vector<fleet::SidecarEntry>> sidecars = fleet::ListSidecars(*etcd);
  if (!sidecars.ok()) return Fail(sidecars.status());
  std::map<std::string, bool> live;
  for (const fleet::SidecarEntry& s : *sidecars) live[s.name] = true;
  if (JsonOutput()) {
    Json list = Json::array();
    for (const auto& h : *holders) list.push_back(HolderToJson(h, live.count(h.sidecar) > 0));
    return PrintJson({{"fleet", flags.url}, {"agents", list}});
  }
  std::cout << "agents: " << holders->size() << "\n";
  for (const auto& h : *holders) {
    std::cout << "  " << move::PeerWords(h.agent) << "\t" << move::PeerWords(h.sidecar) << "\tepoch " << h.epoch
              << "\t" << move::PeerWords(h.state) << (live.count(h.sidecar) ? "" : "\t(holder not live)") << "\n";
  }
  return kExitOk;
}

int RunFleetWhere(const FleetFlags& flags, const std::string& agent) {
  Result<fleet::EtcdClient> etcd = OpenFleet(flags);
  if (!etcd.ok()) return Fail(etcd.status());
  Result<std::optional<fleet::HolderOfRecord>> record = fleet::ReadHolder(*etcd, agent);
  if (!record.ok()) return Fail(record.status());
  if (!record->has_value()) return Fail(Status::NotFound("agent " + agent, "the fleet has no holder of record for it"));
  const fleet::HolderOfRecord& h = **record;
  Result<std::optional<fleet::SidecarEntry>> sidecar = fleet::ReadSidecar(*etcd, h.sidecar);
  if (!sidecar.ok()) return Fail(sidecar.status());
  const bool live = sidecar->has_value();
  const std::string address = live ? (*sidecar)->address : "";
  if (JsonOutput()) {
    Json json = HolderToJson(h, live);
    json["address"] = address;
    return PrintJson(json);
  }
  std::cout << move::PeerWords(agent) << ": held by " << move::PeerWords(h.sidecar) << " at epoch " << h.epoch << " ("
            << move::PeerWords(h.state) << "), "
            << (live ? "live at " + move::PeerWords(address) : std::string("not live (no lease)")) << "\n";
  return kExitOk;
}

int RunFleetSidecars(const FleetFlags& flags) {
  Result<fleet::EtcdClient> etcd = OpenFleet(flags);
  if (!etcd.ok()) return Fail(etcd.status());
  Result<std::vector<fleet::SidecarEntry>> sidecars = fleet::ListSidecars(*etcd);
  if (!sidecars.ok()) return Fail(sidecars.status());
  if (JsonOutput()) {
    Json list = Json::array();
    for (const auto& s : *sidecars) {
      list.push_back({{"name", s.name}, {"address", s.address}, {"agents", s.agents}, {"lease", LeaseHex(s.lease)},
                      {"ttl", s.ttl}});
    }
    return PrintJson({{"fleet", flags.url}, {"sidecars", list}});
  }
  std::cout << "sidecars: " << sidecars->size() << "\n";
  for (const auto& s : *sidecars) {
    std::cout << "  " << move::PeerWords(s.name) << "\t" << move::PeerWords(s.address) << "\t" << s.agents.size()
              << " agent(s)\tlease " << LeaseHex(s.lease) << " (ttl " << s.ttl << " s)\n";
  }
  return kExitOk;
}

int RunFleetRetire(const FleetFlags& flags, const std::string& agent) {
  Result<fleet::EtcdClient> etcd = OpenFleet(flags);
  if (!etcd.ok()) return Fail(etcd.status());
  Result<fleet::HolderOfRecord> before = fleet::RetireRecord(*etcd, agent);
  if (!before.ok()) return Fail(before.status());
  // A live holder sees the record retired within a third of its lease's time (and retires
  // its copy), or stops writing when its lease is lost: either way within one TTL. Grants
  // wait that out, so the command returns only then.
  Result<std::optional<fleet::SidecarEntry>> holder = fleet::ReadSidecar(*etcd, before->sidecar);
  int64_t waited = 0;
  if (holder.ok() && holder->has_value() && before->state != "retired") {
    waited = (*holder)->ttl;
    std::cerr << "capsule: " << move::PeerWords(before->sidecar) << " is live: waiting its lease's ttl, " << waited
              << " s, for it to retire its copy\n";
    std::this_thread::sleep_for(std::chrono::seconds(waited));
  }
  if (JsonOutput()) {
    return PrintJson({{"retired", agent}, {"sidecar", before->sidecar}, {"epoch", before->epoch}, {"waited", waited}});
  }
  std::cout << "retired " << move::PeerWords(agent) << " in the fleet: " << move::PeerWords(before->sidecar)
            << " at epoch " << before->epoch << " no longer holds it; capsule adopt a copy to hold it elsewhere\n";
  return kExitOk;
}

struct DrainArgs {
  std::string sidecar, from, cert, key, ca;
};

// Placement: each agent goes to the live sidecar holding the fewest agents (counting those
// this drain sent it), ties to the first name; one move at a time.
int RunFleetDrain(const FleetFlags& flags, const DrainArgs& args) {
  ::signal(SIGPIPE, SIG_IGN);
  Result<fleet::EtcdClient> opened = OpenFleet(flags);
  if (!opened.ok()) return Fail(opened.status());
  auto etcd = std::make_shared<fleet::EtcdClient>(*opened);
  Result<std::vector<fleet::HolderOfRecord>> holders = fleet::ListHolders(*etcd);
  if (!holders.ok()) return Fail(holders.status());
  Result<std::vector<fleet::SidecarEntry>> sidecars = fleet::ListSidecars(*etcd);
  if (!sidecars.ok()) return Fail(sidecars.status());
  std::map<std::string, size_t> load;
  std::map<std::string, std::string> address;
  for (const fleet::SidecarEntry& s : *sidecars) {
    if (s.name == args.sidecar) continue;
    load[s.name] = s.agents.size();
    address[s.name] = s.address;
  }
  std::vector<std::string> agents;
  for (const fleet::HolderOfRecord& h : *holders) {
    if (h.sidecar == args.sidecar && h.state == "active") agents.push_back(h.agent);
  }
  if (!agents.empty() && load.empty()) {
    return Fail(Status::FailedPrecondition("drain " + args.sidecar, "no other live sidecar in the fleet to take its " +
                                                                        std::to_string(agents.size()) + " agent(s)"));
  }
  move::TlsCredentials credentials{args.cert, args.key, args.ca};
  Json results = Json::array();
  size_t moved = 0;
  for (size_t i = 0; i < agents.size(); ++i) {
    const std::string& agent = agents[i];
    std::string to = load.begin()->first;
    for (const auto& [name, count] : load) {
      if (count < load[to]) to = name;
    }
    std::cerr << "capsule: drain " << move::PeerWords(args.sidecar) << ": " << i + 1 << "/" << agents.size() << " "
              << move::PeerWords(agent) << " to " << move::PeerWords(to) << "\n";
    move::RemoteTarget remote(address[to], move::TlsDialer(address[to], credentials));
    move::FleetTarget target(&remote, etcd, to);
    move::MoveOptions options;
    options.to = address[to];
    Result<move::MoveReport> report = move::RunMove(JoinPath(args.from, agent), &target, options);
    if (report.ok()) {
      ++moved;
      ++load[to];
      results.push_back({{"agent", agent}, {"to", to}, {"epoch", report->epoch}, {"moved", true}});
      if (!JsonOutput()) std::cout << move::PeerWords(agent) << "\t" << move::PeerWords(to) << "\tmoved at epoch " << report->epoch << "\n";
    } else {
      results.push_back({{"agent", agent}, {"to", to}, {"moved", false}, {"error", report.status().message()}});
      if (!JsonOutput()) {
        std::cout << move::PeerWords(agent) << "\t" << move::PeerWords(to) << "\tfailed: "
                  << move::PeerWords(report.status().message()) << "\n";
      }
    }
  }
  if (JsonOutput()) {
    PrintJson({{"drained", args.sidecar}, {"moved", moved}, {"agents", agents.size()}, {"results", results}});
  } else {
    std::cout << "drained " << move::PeerWords(args.sidecar) << ": " << moved << " of " << agents.size()
              << " agent(s) moved\n";
  }
  return moved == agents.size() ? kExitOk : kExitFailed;
}

}  // namespace

void AddFleetOptions(CLI::App* command, FleetFlags* flags, bool with_sidecar) {
  command->add_option("--fleet", flags->url,
                      "The fleet's registry: etcd://HOST:PORT[,HOST:PORT...] (man capsule-protocol.7, FLEET)");
  command->add_option("--fleet-cacert", flags->cacert, "CA certificate etcd's must chain to: HTTPS to etcd (PEM)");
  command->add_option("--fleet-cert", flags->cert, "Client certificate for etcd (PEM; with --fleet-cacert)");
  command->add_option("--fleet-key", flags->key, "Client certificate's private key for etcd (PEM)");
  if (with_sidecar) {
    command->add_option("--sidecar", flags->sidecar,
                        "With --fleet: the name of the sidecar that will serve the capsule (its --fleet-name)");
  }
}

Status ClaimInFleet(const FleetFlags& flags, const std::string& dir, bool adopt, uint64_t* epoch) {
  if (flags.url.empty()) return Status::Ok();
  if (flags.sidecar.empty()) return Status::InvalidArgument("--fleet", "needs --sidecar NAME (who will serve it)");
  CAPSULE_ASSIGN_OR_RETURN(fleet::EtcdClient etcd, OpenFleet(flags));
  std::string agent;
  uint64_t held = 1;
  if (adopt) {
    CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
    agent = manifest.agent.id;
    held = manifest.holder_epoch;
  } else {
    agent = dir;  // init: the agent id
  }
  CAPSULE_ASSIGN_OR_RETURN(std::optional<fleet::HolderOfRecord> record, fleet::ReadHolder(etcd, agent));
  if (!adopt && record) {
    return Status::FailedPrecondition("agent " + agent, "the fleet knows it already (" + record->sidecar +
                                                            " at epoch " + std::to_string(record->epoch) + ", " +
                                                            record->state + "); a copy comes in with capsule adopt");
  }
  *epoch = adopt ? std::max(held, record ? record->epoch : 0) + 1 : 1;
  return fleet::ClaimFresh(etcd, agent, flags.sidecar, *epoch);
}

Result<HolderRecord> HoldAtEpoch(const std::string& dir, uint64_t epoch) {
  CAPSULE_ASSIGN_OR_RETURN(HolderRecord record, HolderRecord::Load(dir));
  record.epoch = epoch;
  CAPSULE_RETURN_IF_ERROR(record.Save(dir));
  // The manifest names its holder's epoch too (KnownEpoch reads it when the record is lost).
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
  manifest.holder_epoch = epoch;
  CAPSULE_RETURN_IF_ERROR(manifest.Save(dir));
  return record;
}

Result<std::string> ResolveSidecar(const FleetFlags& flags, const std::string& name,
                                   std::shared_ptr<fleet::EtcdClient>* etcd) {
  CAPSULE_ASSIGN_OR_RETURN(fleet::EtcdClient client, OpenFleet(flags));
  *etcd = std::make_shared<fleet::EtcdClient>(client);
  CAPSULE_ASSIGN_OR_RETURN(std::optional<fleet::SidecarEntry> entry, fleet::ReadSidecar(client, name));
  if (!entry) return Status::NotFound("--to " + name, "no live sidecar of that name in the fleet " + flags.url);
  return entry->address;
}

void RegisterFleetCommands(CLI::App& app, int* exit_code) {
  CLI::App* fleet_app = app.add_subcommand("fleet", "Ask the fleet's registry on etcd: ls, where, sidecars; retire");
  fleet_app->require_subcommand(1);
  fleet_app->footer("The registry's keys, transactions and lease rule: man capsule-protocol.7, FLEET");
  auto flags = std::make_shared<FleetFlags>();
  auto agent = std::make_shared<std::string>();
  CLI::App* ls = fleet_app->add_subcommand("ls", "Every agent the fleet knows: its holder of record, epoch and state");
  CLI::App* where = fleet_app->add_subcommand("where", "Which sidecar holds AGENT, at which epoch, and its address");
  CLI::App* sidecars = fleet_app->add_subcommand("sidecars", "The live sidecars: name, address, agents, lease");
  CLI::App* retire = fleet_app->add_subcommand(
      "retire", "Retire AGENT's holder of record on purpose (its holder stops writing), so a copy may be adopted");
  for (CLI::App* command : {ls, where, sidecars, retire}) {
    AddFleetOptions(command, flags.get(), false);
    command->get_option("--fleet")->required();
    AddJsonFlag(command);
  }
  where->add_option("AGENT", *agent, "The agent id")->required();
  retire->add_option("AGENT", *agent, "The agent id")->required();
  auto drain_args = std::make_shared<DrainArgs>();
  CLI::App* drain = fleet_app->add_subcommand(
      "drain", "Move every agent SIDECAR holds to the other live sidecars, the one with fewest agents first, one at a "
               "time");
  drain->add_option("SIDECAR", drain_args->sidecar, "The sidecar's name in the fleet")->required();
  drain->add_option("--from", drain_args->from,
                    "Where SIDECAR's agents are, each at DIR/<agent-id> (its --mount-to, or its --root)")
      ->required();
  drain->add_option("--cert", drain_args->cert, "This machine's certificate (PEM)")->required();
  drain->add_option("--key", drain_args->key, "This machine's private key (PEM)")->required();
  drain->add_option("--ca", drain_args->ca, "CA certificate(s) the targets' certificates must chain to (PEM)")
      ->required();
  AddFleetOptions(drain, flags.get(), false);
  drain->get_option("--fleet")->required();
  AddJsonFlag(drain);
  drain->callback([flags, drain_args, exit_code] { *exit_code = RunFleetDrain(*flags, *drain_args); });
  ls->callback([flags, exit_code] { *exit_code = RunFleetList(*flags); });
  where->callback([flags, agent, exit_code] { *exit_code = RunFleetWhere(*flags, *agent); });
  sidecars->callback([flags, exit_code] { *exit_code = RunFleetSidecars(*flags); });
  retire->callback([flags, agent, exit_code] { *exit_code = RunFleetRetire(*flags, *agent); });
}

}  // namespace capsule::cli
