// capsule sql, reindex, facts, runs, why: the owned-state database from the command line.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterOwnedStateCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
