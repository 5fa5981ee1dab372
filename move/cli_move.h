// capsule serve (the sidecar) and capsule move (a move out of this machine).
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterMoveCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
