// The conventions every subcommand shares (man capsule.1, CONVENTIONS): how a failure is
// reported and its exit status, --json, a capsule named by its folder or its mountpoint, and
// usage errors in words.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <iostream>

#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "capsule/format/local_files.h"
#include "fs/control_client.h"

namespace capsule::cli {

namespace {

bool json_output = false;  // set by --json while the command line is parsed

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

void StandardOutputIsData() { json_output = false; }

void PrintJsonError(const std::string& code, const std::string& message, const Json& extra) {
  Json out = extra.is_object() ? extra : Json::object();
  out["error"] = {{"code", code}, {"message", message}};
  std::cout << out.dump() << "\n" << std::flush;
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
  std::cout << value.dump() << "\n";
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
  if (!PathExists(JoinPath(path, kControlFileName))) return path;
  // A capsulefs mount: its control channel names the folder behind it.
  CAPSULE_ASSIGN_OR_RETURN(std::string socket, fs::FindControlSocket(path));
  CAPSULE_ASSIGN_OR_RETURN(Json status, fs::SendControl(socket, "status"));
  auto dir = status.find("dir");
  if (dir == status.end() || !dir->is_string()) {
    return Status::Corruption(path, "the mount's control channel names no capsule folder");
  }
  return dir->get<std::string>();
}

CLI::Validator PositiveWholeNumber() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        bool digits = !text.empty() && text.size() <= 19 &&
                      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (digits && std::strtoull(text.c_str(), nullptr, 10) > 0) return "";
        return "must be a positive whole number, got " + text;
      },
      "N");
}

CLI::Validator OneOf(const std::vector<std::string>& choices) {
  std::string list;
  for (size_t i = 0; i < choices.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + choices[i];
  }
  return CLI::Validator(
      [choices, list](std::string& text) -> std::string {
        if (std::find(choices.begin(), choices.end(), text) != choices.end()) return "";
        return "must be " + list + ", got " + text;
      },
      list);
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string UnknownSubcommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word.empty() || word[0] == '-') return "";  // an option: CLI11 judges the rest
    std::vector<const CLI::App*> subs = at->get_subcommands([](const CLI::App*) { return true; });
    if (subs.empty()) return "";
    const CLI::App* next = nullptr;
    std::string best;
    size_t best_distance = 3;  // suggest only within two edits
    for (const CLI::App* sub : subs) {
      if (sub->get_name() == word) next = sub;
      size_t distance = EditDistance(word, sub->get_name());
      if (distance < best_distance) best_distance = distance, best = sub->get_name();
    }
    if (next != nullptr) {
      at = next;
      continue;
    }
    if (at->get_require_subcommand_min() == 0 && at != &app) return "";  // log DIR: a positional
    std::string command = at == &app ? "capsule" : "capsule " + at->get_name();
    return (at == &app ? "" : at->get_name() + ": ") + "'" + word + "' is not a command" +
           (best.empty() ? "" : "; did you mean '" + best + "'?") + " (" + command + " --help lists them)";
  }
  return "";
}

}  // namespace capsule::cli

namespace capsule::cli {

int UsageFailure(const std::string& message, int argc, char** argv) {
  std::cerr << "capsule: " << message << "\n";
  bool json = json_output;
  for (int i = 1; i < argc && !json; ++i) json = std::string(argv[i]) == "--json";
  if (json) PrintJsonError("usage", message, Json());
  return kExitUsage;
}

}  // namespace capsule::cli
