// Running a program and waiting for it: mmdebstrap for a build, bubblewrap or the command
// itself for a run. The program gets exactly the environment it is given (execve), so that a
// secret reaches it through its environment and never through an argument list.
//
// Thread-safety: RunProcess may be called from any thread; a run's signal handling (below)
// is process-wide and meant for the command line's one run at a time.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::sandbox {

struct ProcessOptions {
  // NAME=value strings, the program's whole environment; nullptr: this process's.
  const std::vector<std::string>* env = nullptr;
  // Standard output and error go to this file (made or truncated) when set; otherwise they
  // are this process's. Standard input is /dev/null when `null_input`.
  std::string output_file;
  bool null_input = false;
  // Working folder of the program; empty: this process's.
  std::string chdir;
  // While the program runs, SIGINT and SIGQUIT (which a terminal sends to the whole
  // foreground group) are ignored here and SIGTERM and SIGHUP are passed on to it, so that
  // this process outlives it and can clean up after it.
  bool forward_signals = false;
  // Descriptors the program inherits (made not close-on-exec in the child only), such as a
  // seccomp program bwrap reads by number.
  std::vector<int> inherit_fds;
  // The program starts in a new, empty session keyring of its own (keyrings(7)): it holds no
  // link to this process's keyrings, and so possesses none of their keys.
  bool new_session_keyring = false;
};

// Runs argv[0] (looked up in PATH when it has no '/') and waits. Its exit code, or 128 plus
// the signal that ended it. NotFound "PROGRAM: not found" when it cannot be run.
Result<int> RunProcess(const std::vector<std::string>& argv, const ProcessOptions& options);

// argv[0] found in PATH (or as given when it has a '/'); empty when it is nowhere.
std::string FindProgram(const std::string& name);

}  // namespace capsule::sandbox
