// The journal's commands of the `capsule` program (man/journal.1.part):
//   capsule log append DIR --type TYPE [--data JSON]   append one event; print its id
//   capsule log DIR [--json]                           the events in order
//   capsule merge DIR OTHER                            add OTHER's events that DIR lacks
//
// Thread-safety: registration happens once, before parsing, on the main thread.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterJournalCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
