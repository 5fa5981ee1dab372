// One run of a command for an agent: in its sandbox under bubblewrap, or on the host.
//
// In the sandbox (bwrap(1)): the root file system read-only, the workspace read-write at
// /workspace (also the working folder), a private /tmp, /proc and /dev, new namespaces of
// every kind (no network unless `network`), and an environment of exactly PATH, HOME, LANG,
// the spec's variables and the secrets. The environment reaches bwrap, and through it the
// command, by execve: no value is ever in an argument list.
//
// What the command cannot do there (man/capsule.1, SECURITY):
//   - it runs as uid and gid 1000 in a user namespace of its own that maps that one id to
//     the user running this process (root, as a rule): the user the workspace's mount serves,
//     so that what it writes is the mount's own, as any write of that user. The namespace gives
//     it no capability outside; --cap-drop ALL leaves it none inside, and no_new_privs none to
//     gain through a set-user-ID program;
//   - the seccomp filter (seccomp_filter.h) refuses mounts, keyrings, tracing, namespaces and
//     loading code into the kernel; --disable-userns refuses nested user namespaces too;
//   - it starts in an empty session keyring of its own, and /proc/keys and /proc/key-users
//     read empty, so the keys of the user it maps to are neither possessed nor listed;
//   - /dev's nodes are the sandbox cache's own (SandboxCache::DeviceNodes) when given: the
//     host's /dev/null belongs to root, whom the command is on the host, and would be its to
//     chmod;
//   - --new-session (no ioctl(TIOCSTI) into the caller's terminal) and --die-with-parent.
//
#pragma once

#include <map>
#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::sandbox {

inline constexpr char kWorkspaceInSandbox[] = "/workspace";
// The command's user and group inside its sandbox.
inline constexpr int kSandboxUid = 1000;
inline constexpr int kSandboxGid = 1000;

struct RunRequest {
  std::vector<std::string> command;
  std::string workspace;                   // host path of the folder the command works in
  std::map<std::string, std::string> env;  // the spec's variables, then the secrets
  std::string rootfs;                      // sandbox runs: the root file system
  bool network = false;                    // sandbox runs: share the host's network
  // Sandbox runs: a folder of the device nodes /dev holds (null, zero, full, random, urandom,
  // tty), the command's to use but not to change; empty: the host's, as bwrap --dev binds them.
  std::string devices;
};

// The command in its sandbox: its exit code (128 plus a signal that ended it).
Result<int> RunInSandbox(const RunRequest& request);

// The command on the host, in the workspace, with this process's environment plus
// request.env.
Result<int> RunOnHost(const RunRequest& request);

// The argument list RunInSandbox gives bwrap, the seccomp program read from descriptor
// `seccomp_fd` (none when negative, for tests): no variable is in it.
std::vector<std::string> BubblewrapArguments(const RunRequest& request, int seccomp_fd = -1);

}  // namespace capsule::sandbox
