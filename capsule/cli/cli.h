// The `capsule` command line: shared plumbing, and one Register*Commands per group of
// subcommands, each in its own *_commands.cc file beside this one.
//
// capsule/cli/ is the top floor: the only code that includes every other floor (capsule/base,
// capsule/format, journal/, fs/, mcp/, move/). A subcommand's callback stores its exit code: 0 done,
// 1 refused or failed (the thing asked for is not so), 2 usage. Errors print as
// "capsule: <what>: <why>" on standard error and, under --json, as
// {"error":{"code":"...","message":"..."}} on standard output too (common.cc; man capsule.1,
// CONVENTIONS).
//
// Thread-safety: registration happens once, before parsing, on the main thread.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/progress.h"
#include "capsule/base/status.h"

namespace capsule {
struct HolderRecord;
}  // namespace capsule

namespace capsule::fleet {
class EtcdClient;
}  // namespace capsule::fleet

namespace capsule::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitUsage = 2;

// Prints "capsule: <message>" on standard error (and the JSON error under --json, with the
// members of `extra` beside "error") and returns the exit status, ExitCode(status).
int Fail(const Status& status);
int Fail(const Status& status, const Json& extra);
int Fail(const std::string& message);
// The one map from a failure to its exit status: kExitFailed (usage is found by the parser).
int ExitCode(const Status& status);
// A usage error (the parser's, or an unknown subcommand): printed as Fail does, exit 2, the
// parser's phrasings first said in words (UsageInWords).
int UsageFailure(const std::string& message, int argc, char** argv);
// "--to: At Most 1 required but received 2" as "--to is given more than once; give it once",
// and the parser's other phrasings likewise; any other message as it is.
std::string UsageInWords(const std::string& parser_message);

// -j/--json, bound to the one process-wide switch JsonOutput() reads; every reporting command
// adds it. PrintJson prints one JSON line on standard output.
void AddJsonFlag(CLI::App* command, const std::string& help = "Print JSON, success and failure alike");
bool JsonOutput();
// -q/--quiet and -v/--verbose of every command (man capsule.1, CONVENTIONS): no progress, or
// progress lines even off a terminal; taken before or after the command's name.
void AddEverydayFlags(CLI::App& app);
// For a command whose standard output is its data (-o -): errors go to standard error only.
void StandardOutputIsData();
int PrintJson(const Json& value);
// {"error":{"code":code,"message":message}} (and the members of `extra`) on standard output.
void PrintJsonError(const std::string& code, const std::string& message, const Json& extra);

// --progress, on every command that can run long (man capsule.1, PROGRESS): progress lines on
// standard error even when it is not a terminal.
void AddProgressFlag(CLI::App* command);
// The one progress reporter, on standard error, when it is a terminal (one line rewritten in
// place) or --progress was given (one line per report); null otherwise. Lines come at most
// every CAPSULE_PROGRESS_INTERVAL_MS milliseconds (default 200), and one at each phase's end.
std::unique_ptr<ProgressReporter> MakeProgress();

// The capsule folder PATH names: PATH itself, or, for the mountpoint of a capsulefs mount,
// the folder behind it (asked of the mount's control channel). NotFound "PATH: no such file
// or folder" when nothing is at PATH. A folder that is not a capsule (no manifest.json) is
// refused, "PATH: not a capsule folder (no manifest.json)", before anything is read, locked or
// written in it.
Result<std::string> ResolveCapsule(const std::string& path);
// Ok when something is at PATH; NotFound "PATH: no such file or folder", or the IOError of
// lstat (ENOTCONN for a mount whose driver died).
Status CheckExists(const std::string& path);

// A file a command reads, named by the user: a path, or "-" for standard input, then copied
// into a private temporary file (0600, in $TMPDIR, removed when this is dropped) that can be
// read as any file. A terminal on standard input is refused.
class InputFile {
 public:
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  ~InputFile();
  // The path to read.
  const std::string& path() const { return path_; }
  // `status` (or a line of a report) with the temporary file's path said as "standard input".
  Status Shown(const Status& status) const;
  std::string Shown(std::string text) const;

 private:
  friend Result<std::unique_ptr<InputFile>> OpenInput(const std::string& given);
  InputFile() = default;
  std::string path_;
  std::string spooled_;  // the temporary file, for "-"
};
Result<std::unique_ptr<InputFile>> OpenInput(const std::string& given);

// The one set of key options: a private key is --key FILE, a public key --pubkey FILE|HEX, on
// every command; `old_spellings` ("--sign", "--seal-to") still set it, hidden from --help.
void AddKeyOption(CLI::App* command, std::string* key, const std::string& help,
                  const std::vector<std::string>& old_spellings = {});
void AddPubkeyOption(CLI::App* command, std::string* pubkey, const std::string& help,
                     const std::vector<std::string>& old_spellings = {});
// The public key --pubkey names: 64 hex digits as given, or read from the file it names.
Result<std::string> PublicKeyArgument(const std::string& given);

// Refuses what a command writes (an -o file, a folder it creates) at PATH when PATH lies
// inside a capsule folder, or inside a capsulefs mount but outside its files/ (and, for a
// `secret` such as a private key, anywhere in a mount): InvalidArgument "WHAT PATH: is inside
// the capsule folder F, ...". "-" (standard output) passes. Called before anything is made.
Status CheckOutsideCapsules(const std::string& what, const std::string& path, bool secret = false);

// Option checks whose refusals are words (usage.cc): "must be a positive whole number, got 0",
// "must be openai, anthropic or gemini, got x".
CLI::Validator PositiveWholeNumber();
CLI::Validator OneOf(const std::vector<std::string>& choices);

// When argv names a subcommand that does not exist: "capsule: 'verfy' is not a command; did
// you mean 'verify'?" (within two edits); empty otherwise.
std::string UnknownSubcommand(const CLI::App& app, int argc, char** argv);

// capsule init, verify, export, import, keygen (capsule_commands.cc).
void RegisterCapsuleCommands(CLI::App& app, int* exit_code);
// capsule import of another framework's state (import_commands.cc): whether FILE is to be read
// so (--from given, or a JSON document where a tar would be), and the import itself: a Letta
// Agent File (--from af, or recognised by its content); --agent picks one of its agents.
bool IsForeignImport(const std::string& file, const std::string& from);
int RunForeignImport(const std::string& file, const std::string& dir, const std::string& from, const std::string& agent);
// capsule export --format af: the capsule as a Letta Agent File (import_commands.cc).
int RunAgentFileExport(const std::string& dir, const std::string& out);
// capsule log append, log, merge (journal_commands.cc).
void RegisterJournalCommands(CLI::App& app, int* exit_code);
// capsule render: the journal as one provider's request body (render_commands.cc).
void RegisterRenderCommands(CLI::App& app, int* exit_code);
// capsule sql, reindex, facts, runs, why: the owned-state database (owned_commands.cc).
void RegisterOwnedStateCommands(CLI::App& app, int* exit_code);
// capsule search: messages, facts and notes by words or by vector (search_commands.cc).
void RegisterSearchCommands(CLI::App& app, int* exit_code);
// For reindex: every embedding model's vector index rebuilt from the owned state.
Status RebuildVectorIndexesOf(const std::string& folder);
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
// capsule schedule, threads, narrow: instructions, skills, threads and schedules
// (harness_commands.cc).
void RegisterHarnessCommands(CLI::App& app, int* exit_code);
// capsule exec: a command in the agent's workspace and sandbox (exec_commands.cc).
void RegisterExecCommands(CLI::App& app, int* exit_code);
// For `capsule exec DIR COMMAND...`: keeps the words after DIR as the command, which no
// option parsing may touch, and returns the argc the parser is to see.
int SplitExecCommand(int argc, char** argv);
// capsule sandbox build, ls, rm: the cache of sandboxes (sandbox_commands.cc).
void RegisterSandboxCommands(CLI::App& app, int* exit_code);
// capsule secret set, rm, ls: an agent's secrets in the keychain (secret_commands.cc).
void RegisterSecretCommands(CLI::App& app, int* exit_code);
// capsule serve (the sidecar, move/sidecar.h) and capsule move (move_commands.cc).
void RegisterMoveCommands(CLI::App& app, int* exit_code);
// capsule help [COMMAND...] and capsule completion bash|zsh|fish, read from every command
// registered before (help_commands.cc, completion.h).
void RegisterHelpCommands(CLI::App& app, int* exit_code);
// capsule accept: takes files edited behind the manifest on purpose (accept_commands.cc).
void RegisterAcceptCommands(CLI::App& app, int* exit_code);
// --accept-edits of exec, stream pack and move: the same accept, first, for the capsule folder
// `dir` when it is at rest and edited behind its manifest; what it takes is listed on
// standard error.
Status AcceptEditsFirst(const std::string& dir);

// --fleet and its TLS options (fleet_commands.cc); with_sidecar adds --sidecar NAME (init,
// adopt: who will serve the capsule).
struct FleetFlags {
  std::string url, cacert, cert, key, sidecar;
};
void AddFleetOptions(CLI::App* command, FleetFlags* flags, bool with_sidecar);
// init and adopt with --fleet: claims the holder of record for `flags.sidecar`, refused while
// the record names another live holder (init: while the fleet knows the agent at all).
// `dir_or_agent`: the agent id for init, the copy's folder for adopt. `epoch`: the epoch held.
Status ClaimInFleet(const FleetFlags& flags, const std::string& dir_or_agent, bool adopt, uint64_t* epoch);
// capsule move --fleet: the address of the live sidecar `name`, and the client it was read
// with (for the move's second witness, move/fleet_target.h).
Result<std::string> ResolveSidecar(const FleetFlags& flags, const std::string& name,
                                   std::shared_ptr<fleet::EtcdClient>* etcd);
// adopt with --fleet: the copy just adopted at `dir` (not mounted, used by no one yet), its
// holder record and manifest rewritten at the epoch the registry gave it.
Result<HolderRecord> HoldAtEpoch(const std::string& dir, uint64_t epoch);
void RegisterFleetCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
