// Runs the real `capsule` binary from end-to-end tests and captures what it prints.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "capsule/base/temp_dir.h"

namespace capsule::testing {

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
  long peak_rss_kib = -1;  // the program's peak resident set (its rusage's ru_maxrss)
};

// Runs ./capsule (the binary in the test's runfiles) with `args`; `stdin_text` is its input.
RunResult RunCapsule(const std::vector<std::string>& args, const std::string& stdin_text = "");
// Runs any program found on PATH or by path.
RunResult RunProgram(const std::string& program, const std::vector<std::string>& args,
                     const std::string& stdin_text = "");

// Runs a shell command, returning its exit status (0 on success).
int Shell(const std::string& command);

// A kilobyte field of /proc/PID/status (VmRSS, VmHWM) of a running program, in MiB; -1 when
// it cannot be read.
double ProcStatusMiB(pid_t pid, const std::string& field);

}  // namespace capsule::testing
