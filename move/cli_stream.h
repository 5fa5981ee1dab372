// capsule stream pack, unpack and have: the Move Stream (man/capsule-move.5) on the command line.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterStreamCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
