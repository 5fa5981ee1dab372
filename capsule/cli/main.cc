// capsule: the command line tool for capsules. See man/capsule.1.
#include <CLI/CLI.hpp>
#include <signal.h>

#include <iostream>

#include "capsule/base/version.h"
#include "capsule/cli/cli.h"

int main(int argc, char** argv) {
  // A write past the file size limit (ulimit -f) fails with EFBIG and is reported as any
  // failed write, instead of ending the process (a sidecar, a mount's helper) mid-command.
  ::signal(SIGXFSZ, SIG_IGN);
  CLI::App app{"capsule: an AI agent's state as a folder of plain files", "capsule"};
  app.set_version_flag("-V,--version", std::string("capsule ") + capsule::kVersion);
  app.require_subcommand(1);
  app.footer("Exit status: 0 done, 1 not so (refused, failed, not found), 2 usage. Every command that reports takes\n"
             "--json (a failure too); a capsule is named by its folder or its mountpoint. man capsule.1, CONVENTIONS");
  int exit_code = capsule::cli::kExitOk;
  capsule::cli::AddEverydayFlags(app);
  capsule::cli::RegisterCapsuleCommands(app, &exit_code);
  capsule::cli::RegisterSealCommands(app, &exit_code);
  capsule::cli::RegisterStreamCommands(app, &exit_code);
  capsule::cli::RegisterJournalCommands(app, &exit_code);
  capsule::cli::RegisterRenderCommands(app, &exit_code);
  capsule::cli::RegisterOwnedStateCommands(app, &exit_code);
  capsule::cli::RegisterSearchCommands(app, &exit_code);
  capsule::cli::RegisterMcpCommands(app, &exit_code);
  capsule::cli::RegisterMountCommands(app, &exit_code);
  capsule::cli::RegisterHarnessCommands(app, &exit_code);
  capsule::cli::RegisterMoveCommands(app, &exit_code);
  capsule::cli::RegisterFleetCommands(app, &exit_code);
  capsule::cli::RegisterExecCommands(app, &exit_code);
  capsule::cli::RegisterSandboxCommands(app, &exit_code);
  capsule::cli::RegisterSecretCommands(app, &exit_code);
  capsule::cli::RegisterAcceptCommands(app, &exit_code);
  capsule::cli::RegisterHelpCommands(app, &exit_code);  // last: it lists every command above
  argc = capsule::cli::SplitExecCommand(argc, argv);
  std::string unknown = capsule::cli::UnknownSubcommand(app, argc, argv);
  if (!unknown.empty()) return capsule::cli::UsageFailure(unknown, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // prints help or the version
    return capsule::cli::UsageFailure(e.what(), argc, argv);
  }
  return exit_code;
}
