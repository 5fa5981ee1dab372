// capsule secret set|rm|ls: an agent's secrets in this machine's keychain (the kernel
// keyring, sandbox/keychain.h). A value comes from standard input only, never from the
// command line, and is never written to a file.
#include <unistd.h>

#include <cctype>
#include <iostream>
#include <iterator>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "sandbox/keychain.h"

namespace capsule::cli {

namespace {

struct SecretArgs {
  std::string agent, name;
};

// AGENT is an agent id, or a capsule folder or mountpoint (its manifest's agent id).
Result<std::string> AgentOf(const std::string& agent) {
  if (agent.find('/') != std::string::npos || PathExists(JoinPath(agent, kManifestPath))) {
    CAPSULE_ASSIGN_OR_RETURN(std::string dir, ResolveCapsule(agent));
    CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(dir));
    return manifest.agent.id;
  }
  CAPSULE_RETURN_IF_ERROR(CheckAgentId(agent));
  return agent;
}

// The largest secret read from standard input (the kernel keyring takes 32 KiB a key).
constexpr uint64_t kMaxSecretBytes = 64 << 10;

Status CheckName(const std::string& name) {
  bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0]));
  for (char c : name) ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_');
  return ok ? Status::Ok() : Status::InvalidArgument(name, "not a variable name (letters, digits and '_', not starting with a digit)");
}

int RunSet(const SecretArgs& args) {
  Result<std::string> agent = AgentOf(args.agent);
  if (!agent.ok()) return Fail(agent.status());
  if (Status named = CheckName(args.name); !named.ok()) return Fail(named);
  if (::isatty(STDIN_FILENO)) std::cerr << "capsule: value of " << args.name << " (then end of input, Ctrl-D):\n";
  Result<std::string> read = ReadStreamBounded(STDIN_FILENO, "standard input", kMaxSecretBytes, "a secret's value");
  if (!read.ok()) return Fail(read.status().WithContext("secret " + args.name));
  std::string value = std::move(read).value();
  // `echo VALUE |` and a terminal end the value with a newline that is no part of it.
  if (!value.empty() && value.back() == '\n') value.pop_back();
  if (!value.empty() && value.back() == '\r') value.pop_back();
  if (value.empty()) return Fail(Status::InvalidArgument("secret " + args.name, "empty value on standard input"));
  Status set = sandbox::SetSecret(*agent, args.name, value);
  std::fill(value.begin(), value.end(), '\0');
  if (!set.ok()) return Fail(set);
  if (JsonOutput()) return PrintJson({{"agent", *agent}, {"secret", args.name}, {"set", true}});
  std::cout << "secret " << args.name << " of agent " << *agent << " set in this machine's keychain\n";
  return kExitOk;
}

int RunRemove(const SecretArgs& args) {
  Result<std::string> agent = AgentOf(args.agent);
  if (!agent.ok()) return Fail(agent.status());
  if (Status removed = sandbox::RemoveSecret(*agent, args.name); !removed.ok()) return Fail(removed);
  if (JsonOutput()) return PrintJson({{"agent", *agent}, {"secret", args.name}, {"removed", true}});
  std::cout << "secret " << args.name << " of agent " << *agent << " removed\n";
  return kExitOk;
}

int RunList(const SecretArgs& args) {
  Result<std::string> agent = AgentOf(args.agent);
  if (!agent.ok()) return Fail(agent.status());
  Result<std::vector<std::string>> names = sandbox::ListSecrets(*agent);
  if (!names.ok()) return Fail(names.status());
  if (JsonOutput()) return PrintJson({{"agent", *agent}, {"secrets", *names}});
  for (const std::string& name : *names) std::cout << name << "\n";
  return kExitOk;
}

}  // namespace

void RegisterSecretCommands(CLI::App& app, int* exit_code) {
  CLI::App* secret = app.add_subcommand(
      "secret", "An agent's secrets in this machine's keychain (the kernel keyring): values never in a file");
  secret->require_subcommand(1);
  const std::string agent_help = "Agent id (or its capsule folder or mountpoint)";

  auto set_args = std::make_shared<SecretArgs>();
  CLI::App* set = secret->add_subcommand("set", "Store a secret's value, read from standard input (one final newline dropped)");
  set->add_option("AGENT", set_args->agent, agent_help)->required();
  set->add_option("NAME", set_args->name, "Variable name, as the environment spec's \"secrets\" lists it")->required();
  AddJsonFlag(set);
  set->callback([set_args, exit_code] { *exit_code = RunSet(*set_args); });

  auto rm_args = std::make_shared<SecretArgs>();
  CLI::App* rm = secret->add_subcommand("rm", "Remove a secret from the keychain");
  rm->add_option("AGENT", rm_args->agent, agent_help)->required();
  rm->add_option("NAME", rm_args->name, "Variable name")->required();
  AddJsonFlag(rm);
  rm->callback([rm_args, exit_code] { *exit_code = RunRemove(*rm_args); });

  auto ls_args = std::make_shared<SecretArgs>();
  CLI::App* ls = secret->add_subcommand("ls", "List the names (never the values) of an agent's secrets in the keychain");
  ls->add_option("AGENT", ls_args->agent, agent_help)->required();
  AddJsonFlag(ls);
  ls->callback([ls_args, exit_code] { *exit_code = RunList(*ls_args); });
}

}  // namespace capsule::cli
