#include "sandbox/sandbox_run.h"

#include <unistd.h>

#include <cstring>

#include "capsule/base/file_io.h"
#include "sandbox/process.h"

extern char** environ;

namespace capsule::sandbox {

namespace {

// Wipes the strings that held values when the run is over.
struct WipedEnv {
  std::vector<std::string> vars;
  ~WipedEnv() {
    for (std::string& var : vars) explicit_bzero(var.data(), var.size());
  }
};

}  // namespace

std::vector<std::string> BubblewrapArguments(const RunRequest& request) {
  std::vector<std::string> args = {"bwrap", "--unshare-all"};
  if (request.network) args.push_back("--share-net");
  args.insert(args.end(), {"--die-with-parent", "--new-session", "--ro-bind", request.rootfs, "/", "--proc", "/proc",
                           "--dev", "/dev", "--tmpfs", "/tmp", "--bind", request.workspace, kWorkspaceInSandbox,
                           "--chdir", kWorkspaceInSandbox, "--hostname", "sandbox"});
  if (request.network && PathExists("/etc/resolv.conf")) {
    // The host's resolver, read-only, over the image's (which mmdebstrap copied at build).
    args.insert(args.end(), {"--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"});
  }
  args.push_back("--");
  args.insert(args.end(), request.command.begin(), request.command.end());
  return args;
}

Result<int> RunInSandbox(const RunRequest& request) {
  if (FindProgram("bwrap").empty()) {
    return Status::FailedPrecondition("sandbox", "bubblewrap is not installed (apt-get install bubblewrap)");
  }
  std::map<std::string, std::string> env = {
      {"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
      {"HOME", kWorkspaceInSandbox},
      {"LANG", "C.UTF-8"},
  };
  for (const auto& [name, value] : request.env) env[name] = value;
  WipedEnv vars;
  for (const auto& [name, value] : env) vars.vars.push_back(name + "=" + value);
  ProcessOptions options;
  options.env = &vars.vars;
  options.forward_signals = true;
  return RunProcess(BubblewrapArguments(request), options);
}

Result<int> RunOnHost(const RunRequest& request) {
  std::map<std::string, std::string> env;
  for (char** var = environ; *var != nullptr; ++var) {
    const char* equals = std::strchr(*var, '=');
    if (equals != nullptr) env[std::string(*var, static_cast<size_t>(equals - *var))] = equals + 1;
  }
  for (const auto& [name, value] : request.env) env[name] = value;
  env["PWD"] = request.workspace;
  WipedEnv vars;
  for (const auto& [name, value] : env) vars.vars.push_back(name + "=" + value);
  ProcessOptions options;
  options.env = &vars.vars;
  options.chdir = request.workspace;
  options.forward_signals = true;
  Result<int> ran = RunProcess(request.command, options);
  if (!ran.ok() && ran.status().code() == Code::kNotFound) return Status::NotFound(request.command[0], "command not found");
  return ran;
}

}  // namespace capsule::sandbox
