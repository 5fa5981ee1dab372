// One run of a command for an agent: in its sandbox under bubblewrap, or on the host.
//
// In the sandbox (bwrap(1)): the root file system read-only, the workspace read-write at
// /workspace (also the working folder), a private /tmp, /proc and /dev, new namespaces of
// every kind (no network unless `network`), and an environment of exactly PATH, HOME, LANG,
// the spec's variables and the secrets. The environment reaches bwrap, and through it the
// command, by execve: no value is ever in an argument list.
//
// Thread-safety: one run at a time per process (RunProcess's signal forwarding).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::sandbox {

inline constexpr char kWorkspaceInSandbox[] = "/workspace";

struct RunRequest {
  std::vector<std::string> command;
  std::string workspace;                   // host path of the folder the command works in
  std::map<std::string, std::string> env;  // the spec's variables, then the secrets
  std::string rootfs;                      // sandbox runs: the root file system
  bool network = false;                    // sandbox runs: share the host's network
};

// The command in its sandbox: its exit code (128 plus a signal that ended it).
Result<int> RunInSandbox(const RunRequest& request);

// The command on the host, in the workspace, with this process's environment plus
// request.env.
Result<int> RunOnHost(const RunRequest& request);

// The argument list RunInSandbox gives bwrap (for tests and --help): no variable is in it.
std::vector<std::string> BubblewrapArguments(const RunRequest& request);

}  // namespace capsule::sandbox
