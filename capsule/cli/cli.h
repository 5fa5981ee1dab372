// The `capsule` command line: shared plumbing, and one Register*Commands per group of
// subcommands, each in its own *_commands.cc file beside this one.
//
// capsule/cli/ is the top floor: the only code that includes every other floor (capsule/base,
// capsule/format, journal/, fs/, mcp/, move/). A subcommand's callback stores its exit code: 0 done,
// 1 refused or failed, 2 usage. Errors print as "capsule: <what>: <why>" on standard error.
//
// Thread-safety: registration happens once, before parsing, on the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "capsule/base/status.h"

namespace capsule::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Prints "capsule: <message>" on standard error and returns kExitFailed.
int Fail(const Status& status);
int Fail(const std::string& message);

// capsule init, verify, export, import, keygen (capsule_commands.cc).
void RegisterCapsuleCommands(CLI::App& app, int* exit_code);
// capsule log append, log, merge (journal_commands.cc).
void RegisterJournalCommands(CLI::App& app, int* exit_code);
// capsule render: the journal as one provider's request body (render_commands.cc).
void RegisterRenderCommands(CLI::App& app, int* exit_code);
// capsule sql, reindex, facts, runs, why: the owned-state database (owned_commands.cc).
void RegisterOwnedStateCommands(CLI::App& app, int* exit_code);
// capsule mcp: the Model Context Protocol server over standard input and output
// (mcp_commands.cc).
void RegisterMcpCommands(CLI::App& app, int* exit_code);
// capsule status, freeze, thaw: a mount's control channel; status of a folder with no mount
// reads its holder record (mount_commands.cc).
void RegisterMountCommands(CLI::App& app, int* exit_code);
// capsule seal and open: the sealed envelope, standard input to standard output
// (seal_commands.cc).
void RegisterSealCommands(CLI::App& app, int* exit_code);
// capsule stream pack, unpack and have: the Move Stream (stream_commands.cc).
void RegisterStreamCommands(CLI::App& app, int* exit_code);
// capsule serve (the sidecar, move/sidecar.h) and capsule move (move_commands.cc).
void RegisterMoveCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
