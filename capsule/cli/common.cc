// The conventions every subcommand shares (man capsule.1, CONVENTIONS): how a failure is
// reported and its exit status, --json, and a capsule named by its folder or its mountpoint.
// Usage errors are in usage.cc.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cctype>
#include <cstdlib>
#include <iostream>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/keys.h"
#include "capsule/format/local_files.h"
#include "fs/control_client.h"

namespace capsule::cli {

namespace {

bool json_output = false;  // set by --json while the command line is parsed
bool progress_flag = false;  // set by --progress or -v
bool quiet_flag = false;     // set by -q

std::string ErrorCode(Code code) {
  std::string name = CodeName(code);
  std::replace(name.begin(), name.end(), ' ', '_');
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name == "i/o_error" ? "io_error" : name;
}

}  // namespace

void AddJsonFlag(CLI::App* command, const std::string& help) {
  command->add_flag("-j,--json", json_output, help);
}

void AddEverydayFlags(CLI::App& app) {
  // Given before or after the command's name: every command falls through to these.
  app.fallthrough();
  app.add_flag("-q,--quiet", quiet_flag, "No progress lines, even on a terminal");
  app.add_flag("-v,--verbose", progress_flag, "Progress lines on standard error even when it is not a terminal");
}

bool JsonOutput() { return json_output; }

void AddProgressFlag(CLI::App* command) {
  command->add_flag("--progress", progress_flag,
                    "Print progress (bytes and files of the total, rate, time left) on standard error even when it "
                    "is not a terminal");
}

std::unique_ptr<ProgressReporter> MakeProgress() {
  bool terminal = ::isatty(STDERR_FILENO);
  if (quiet_flag || (!terminal && !progress_flag)) return nullptr;
  ProgressReporter::Options options;
  options.out = stderr;
  options.rewrite = terminal;
  if (const char* ms = std::getenv("CAPSULE_PROGRESS_INTERVAL_MS"); ms != nullptr && *ms != '\0') {
    options.interval = std::chrono::milliseconds(std::strtoll(ms, nullptr, 10));
  }
  return std::make_unique<ProgressReporter>(options);
}

void StandardOutputIsData() { json_output = false; }

void PrintJsonError(const std::string& code, const std::string& message, const Json& extra) {
  Json out = extra.is_object() ? extra : Json::object();
  out["error"] = {{"code", code}, {"message", message}};
  std::cout << JsonText(out) << "\n" << std::flush;
}

int ExitCode(const Status& status) { return status.ok() ? kExitOk : kExitFailed; }

namespace {

// A message is one line, then at most one hint line ("hint: ..."), each printed on its own.
void PrintFailure(const std::string& code, const std::string& message, const Json& extra) {
  const size_t end = message.find('\n');
  const std::string line = message.substr(0, end);
  const std::string hint = end == std::string::npos ? "" : message.substr(end + 1);
  std::cerr << "capsule: " << line << "\n";
  if (!hint.empty()) std::cerr << hint << "\n";
  if (!json_output) return;
  Json with_hint = extra.is_object() ? extra : Json::object();
  if (!hint.empty()) with_hint["hint"] = hint.rfind("hint: ", 0) == 0 ? hint.substr(6) : hint;
  PrintJsonError(code, line, with_hint);
}

}  // namespace

int Fail(const Status& status, const Json& extra) {
  PrintFailure(ErrorCode(status.code()), status.message(), extra);
  return ExitCode(status);
}

int Fail(const Status& status) { return Fail(status, Json()); }

int Fail(const std::string& message) {
  PrintFailure("failed", message, Json());
  return kExitFailed;
}

int PrintJson(const Json& value) {
  std::cout << JsonText(value) << "\n";
  return std::cout.flush() ? kExitOk : Fail("standard output: write failed");
}

void AddKeyOption(CLI::App* command, std::string* key, const std::string& help,
                  const std::vector<std::string>& old_spellings) {
  command->add_option("--key", *key, help + " (--key FILE)");
  for (const std::string& old : old_spellings) command->add_option(old, *key)->group("");  // hidden
}

void AddPubkeyOption(CLI::App* command, std::string* pubkey, const std::string& help,
                     const std::vector<std::string>& old_spellings) {
  command->add_option("--pubkey", *pubkey, help + " (--pubkey FILE|HEX: a file holding it, or its 64 hex digits)");
  for (const std::string& old : old_spellings) command->add_option(old, *pubkey)->group("");  // hidden
}

Result<std::string> PublicKeyArgument(const std::string& given) {
  const bool hex = given.size() == 64 && std::all_of(given.begin(), given.end(), [](char c) {
                     return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
                   });
  if (hex) return given;
  if (Status there = CheckExists(given); !there.ok()) {
    return Status::InvalidArgument("--pubkey " + given, "neither 64 hex digits nor a file holding them");
  }
  return LoadPublicKeyHexFile(given);
}

Status CheckExists(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0) return Status::Ok();
  // A mount whose driver died answers ENOTCONN: say that, not "missing".
  if (errno == ENOENT) return Status::NotFound(path, "no such file or folder");
  return Status::IOError(path, errno);
}

Result<std::string> ResolveCapsule(const std::string& path) {
  CAPSULE_RETURN_IF_ERROR(CheckExists(path));
  if (!PathExists(JoinPath(path, kControlFileName))) {
    // A folder must be a capsule before anything reads, locks or writes in it; a file is left
    // to the command (verify takes an exported tar).
    struct stat st;
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) CAPSULE_RETURN_IF_ERROR(CheckCapsuleFolder(path));
    return path;
  }
  // A capsulefs mount: its control channel names the folder behind it.
  CAPSULE_ASSIGN_OR_RETURN(std::string socket, fs::FindControlSocket(path));
  CAPSULE_ASSIGN_OR_RETURN(Json status, fs::SendControl(socket, "status"));
  auto dir = status.find("dir");
  if (dir == status.end() || !dir->is_string()) {
    return Status::Corruption(path, "the mount's control channel names no capsule folder");
  }
  return dir->get<std::string>();
}

Status CheckOutsideCapsules(const std::string& what, const std::string& path, bool secret) {
  if (path == "-") return Status::Ok();
  return CheckNotInsideCapsule(what, path, secret);
}

}  // namespace capsule::cli
