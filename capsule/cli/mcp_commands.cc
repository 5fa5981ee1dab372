// capsule mcp DIR|MOUNTPOINT: the Model Context Protocol server over standard input and output.
// See mcp/server.h and man/capsule-mcp.7.
#include "capsule/cli/cli.h"

#include <signal.h>
#include <unistd.h>

#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/layout.h"
#include "mcp/server.h"

namespace capsule::cli {

namespace {

// The capsule folder behind `path`, as every command finds it (ResolveCapsule): the folder a
// running mount serves, or `path` itself, which must then be a capsule folder.
Result<std::string> CapsuleFolder(const std::string& path) {
  Result<std::string> resolved = ResolveCapsule(path);
  if (!resolved.ok() && resolved.status().code() != Code::kInvalidArgument) return resolved.status();
  const std::string dir = resolved.ok() ? *resolved : path;
  if (!resolved.ok() || !PathExists(JoinPath(dir, kManifestPath))) {
    return resolved.ok() ? NotACapsule(path) : resolved.status();
  }
  return dir;
}

int RunMcp(const std::string& path) {
  // A client that goes away closes our output: the write fails and the server stops.
  ::signal(SIGPIPE, SIG_IGN);
  Result<std::string> dir = CapsuleFolder(path);
  if (!dir.ok()) return Fail(dir.status());
  Result<std::unique_ptr<mcp::Server>> server = mcp::Server::Open({*dir, path, {}});
  if (!server.ok()) return Fail(server.status().WithContext("mcp"));
  Status served = (*server)->Serve(STDIN_FILENO, STDOUT_FILENO);
  if (!served.ok()) return Fail(served.WithContext("mcp"));
  return kExitOk;
}

}  // namespace

void RegisterMcpCommands(CLI::App& app, int* exit_code) {
  auto path = std::make_shared<std::string>();
  CLI::App* mcp = app.add_subcommand(
      "mcp", "Serve the capsule's history, memory and runs as a Model Context Protocol server on standard input and output");
  mcp->add_option("PATH", *path, "Capsule folder or capsulefs mountpoint")->required();
  mcp->footer(
      "Standard output is the protocol's (one JSON-RPC message a line): it takes no --json, and a failure is\n"
      "reported on standard error only. Exit status: 0 when the client closes standard input, 1 when PATH\n"
      "is no capsule or the server stops on an error, 2 usage. man capsule-mcp.7");
  mcp->callback([path, exit_code] { *exit_code = RunMcp(*path); });
}

}  // namespace capsule::cli
