// capsule seal and capsule open: the sealed envelope (man/capsule-envelope.5) on the command
// line, from standard input to standard output.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterSealCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
