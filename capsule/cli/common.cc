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
#include "capsule/format/local_files.h"
#include "fs/control_client.h"

namespace capsule::cli {

namespace {

bool json_output = false;  // set by --json while the command line is parsed
bool progress_flag = false;  // set by --progress

std::string ErrorCode(Code code) {
  std::string name = CodeName(code);
  std::replace(name.begin(), name.end(), ' ', '_');
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
  return name == "i/o_error" ? "io_error" : name;
}

}  // namespace

void AddJsonFlag(CLI::App* command, const std::string& help) {
  command->add_flag("--json", json_output, help);
}

bool JsonOutput() { return json_output; }

void AddProgressFlag(CLI::App* command) {
  command->add_flag("--progress", progress_flag,
                    "Print progress (bytes and files of the total, rate, time left) on standard error even when it "
                    "is not a terminal");
}

std::unique_ptr<ProgressReporter> MakeProgress() {
  bool terminal = ::isatty(STDERR_FILENO);
  if (!terminal && !progress_flag) return nullptr;
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

int Fail(const Status& status, const Json& extra) {
  std::cerr << "capsule: " << status.message() << "\n";
  if (json_output) PrintJsonError(ErrorCode(status.code()), status.message(), extra);
  return ExitCode(status);
}

int Fail(const Status& status) { return Fail(status, Json()); }

int Fail(const std::string& message) {
  std::cerr << "capsule: " << message << "\n";
  if (json_output) PrintJsonError("failed", message, Json());
  return kExitFailed;
}

int PrintJson(const Json& value) {
  std::cout << JsonText(value) << "\n";
  return std::cout.flush() ? kExitOk : Fail("standard output: write failed");
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
