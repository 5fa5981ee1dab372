#include "sandbox/sandbox_run.h"

#include <unistd.h>

#include <cstring>

#include "capsule/base/file_io.h"
#include "sandbox/process.h"
#include "sandbox/seccomp_filter.h"

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

// The device nodes /dev holds, by name.
constexpr const char* kDeviceNames[] = {"null", "zero", "full", "random", "urandom", "tty"};

std::vector<std::string> BubblewrapArguments(const RunRequest& request, int seccomp_fd) {
  std::vector<std::string> args = {"bwrap", "--unshare-all"};
  if (request.network) args.push_back("--share-net");
  args.insert(args.end(), {"--unshare-user", "--disable-userns", "--uid", std::to_string(kSandboxUid), "--gid",
                           std::to_string(kSandboxGid), "--cap-drop", "ALL", "--die-with-parent", "--new-session",
                           "--ro-bind", request.rootfs, "/", "--proc", "/proc", "--dev", "/dev"});
  std::string null_device = "/dev/null";
  if (!request.devices.empty()) {
    for (const char* name : kDeviceNames) {
      args.insert(args.end(), {"--dev-bind", JoinPath(request.devices, name), std::string("/dev/") + name});
    }
    null_device = JoinPath(request.devices, "null");
  }
  // The keys the user the command maps to can view, listed by the kernel: read as empty.
  args.insert(args.end(), {"--dev-bind", null_device, "/proc/keys", "--dev-bind", null_device, "/proc/key-users"});
  args.insert(args.end(), {"--tmpfs", "/tmp", "--bind", request.workspace, kWorkspaceInSandbox, "--chdir",
                           kWorkspaceInSandbox, "--hostname", "sandbox"});
  if (request.network && PathExists("/etc/resolv.conf")) {
    // The host's resolver, read-only, over the image's (which mmdebstrap copied at build).
    args.insert(args.end(), {"--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf"});
  }
  if (seccomp_fd >= 0) args.insert(args.end(), {"--seccomp", std::to_string(seccomp_fd)});
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
  if (::geteuid() == 0 && request.devices.empty()) {
    // Bound from the host, /dev/null would be the command's to chmod: it is root's.
    return Status::FailedPrecondition("sandbox", "a run as root needs device nodes of its own (SandboxCache::DeviceNodes)");
  }
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd seccomp, SandboxSeccompProgram());
  ProcessOptions options;
  options.env = &vars.vars;
  options.forward_signals = true;
  options.inherit_fds = {seccomp.get()};
  options.new_session_keyring = true;
  return RunProcess(BubblewrapArguments(request, seccomp.get()), options);
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
