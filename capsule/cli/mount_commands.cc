#include "capsule/cli/cli.h"

#include <iostream>
#include <memory>

#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/holder.h"
#include "fs/control_client.h"

namespace capsule::cli {
namespace {

struct MountArgs {
  std::string path;
  std::string timeout;  // freeze --timeout: "90s", "10m", "2h" or whole seconds; empty: none
};

// The seconds of a duration such as 90s, 10m, 2h or 600 (seconds); 0 when it is not one, or
// out of the control channel's range.
uint64_t DurationSeconds(const std::string& text) {
  if (text.empty() || text.size() > 12) return 0;
  uint64_t unit = 1;
  std::string digits = text;
  switch (text.back()) {
    case 's': unit = 1; digits.pop_back(); break;
    case 'm': unit = 60; digits.pop_back(); break;
    case 'h': unit = 3600; digits.pop_back(); break;
    case 'd': unit = 86400; digits.pop_back(); break;
    default: break;
  }
  if (digits.empty()) return 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return 0;
  }
  uint64_t seconds = std::stoull(digits) * unit;
  return seconds <= fs::kMaxFreezeTimeoutSeconds ? seconds : 0;
}

void Print(const Json& status, bool json) {
  if (json) {
    Json out = {{"agent", status.value("agent", "")}, {"epoch", status.value("epoch", 0)},
                {"state", status.value("state", "")}};
    std::cout << JsonText(out) << "\n";
  } else {
    std::cout << "agent " << status.value("agent", "") << "\nepoch " << status.value("epoch", 0) << "\nstate "
              << status.value("state", "") << "\n";
  }
}

int Run(const std::string& command, const MountArgs& args) {
  if (Status there = CheckExists(args.path); !there.ok()) return Fail(there);
  Result<std::string> socket = fs::FindControlSocket(args.path);
  if (socket.ok()) {
    std::string line = command;
    if (!args.timeout.empty()) line += " timeout=" + std::to_string(DurationSeconds(args.timeout));
    Result<Json> reply = fs::SendControl(*socket, line);
    if (reply.ok()) {
      Print(*reply, JsonOutput());
      return kExitOk;
    }
    if (command != "status" || reply.status().code() != Code::kUnavailable) return Fail(reply.status().WithContext(args.path));
  } else if (command != "status") {
    // A folder that is not a capsule is named as such, as every command names it.
    if (Status capsule = CheckCapsuleFolder(args.path); !capsule.ok()) return Fail(capsule);
    return Fail(socket.status());
  }
  // status of a capsule folder that no mount serves: its holder record.
  if (Status capsule = CheckCapsuleFolder(args.path); !capsule.ok()) return Fail(capsule);
  Result<HolderRecord> record = HolderRecord::Load(args.path);
  if (!record.ok()) return Fail(record.status());
  Print(Json{{"agent", record->agent}, {"epoch", record->epoch}, {"state", HolderStateName(record->state)}},
        JsonOutput());
  return kExitOk;
}

}  // namespace

void RegisterMountCommands(CLI::App& app, int* exit_code) {
  struct Command {
    const char* name;
    const char* help;
  };
  for (Command c : {Command{"status", "Print the agent id, epoch and state (active, frozen, retired) of a mount or capsule"},
                    Command{"freeze", "Commit every write in flight and make the capsule current; then writes wait"},
                    Command{"thaw", "Let the writes of a frozen mount go on (refused when a move froze it: capsule move --recover); "
                                  "a thawed mount is left as it is"}}) {
    auto args = std::make_shared<MountArgs>();
    std::string name = c.name;
    CLI::App* sub = app.add_subcommand(name, c.help);
    sub->add_option("MOUNTPOINT", args->path, name == "status" ? "Mountpoint or capsule folder" : "Mountpoint")->required();
    if (name == "freeze") {
      sub->add_option("--timeout", args->timeout,
                      "Thaw by itself after this long (90s, 10m, 2h, 1d; at most 30 days), and say so in the "
                      "driver's log; a move's freeze takes over without it")
          ->check(CLI::Validator(
              [](std::string& text) -> std::string {
                return DurationSeconds(text) > 0 ? "" : "must be a duration such as 90s, 10m, 2h or 1d (at most 30 days), got " + text;
              },
              "DURATION"));
    }
    AddJsonFlag(sub, "Print agent, epoch and state as JSON (an error as JSON)");
    sub->callback([name, args, exit_code] { *exit_code = Run(name, *args); });
  }
}

}  // namespace capsule::cli
