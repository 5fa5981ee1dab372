// The `capsule` command line: shared plumbing for its subcommands.
//
// Each group of subcommands lives in its own cli_*.cc file and registers itself on the app
// with a Register*Commands function. A subcommand's callback stores its exit code: 0 done,
// 1 refused or failed, 2 usage. Errors print as "capsule: <what>: <why>" on standard error.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "capsule/status.h"

namespace capsule::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Prints "capsule: <message>" on standard error and returns kExitFailed.
int Fail(const Status& status);
int Fail(const std::string& message);

void RegisterCapsuleCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
