// `capsule status|freeze|thaw MOUNTPOINT`: the mount's control channel from the command line.
// See fs/control.h for the channel; `status` of a capsule folder with no mount reads its
// holder record.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterMountCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
