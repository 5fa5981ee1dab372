// capsule: the command line tool for capsules. See man/capsule.1.
#include <CLI/CLI.hpp>

#include <iostream>

#include "capsule/base/version.h"
#include "capsule/cli/cli.h"

int main(int argc, char** argv) {
  CLI::App app{"capsule: an AI agent's state as a folder of plain files", "capsule"};
  app.set_version_flag("--version", std::string("capsule ") + capsule::kVersion);
  app.require_subcommand(1);
  int exit_code = capsule::cli::kExitOk;
  capsule::cli::RegisterCapsuleCommands(app, &exit_code);
  capsule::cli::RegisterSealCommands(app, &exit_code);
  capsule::cli::RegisterStreamCommands(app, &exit_code);
  capsule::cli::RegisterJournalCommands(app, &exit_code);
  capsule::cli::RegisterRenderCommands(app, &exit_code);
  capsule::cli::RegisterOwnedStateCommands(app, &exit_code);
  capsule::cli::RegisterMcpCommands(app, &exit_code);
  capsule::cli::RegisterMountCommands(app, &exit_code);
  capsule::cli::RegisterMoveCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);  // prints help, the version or the usage error
    return code == 0 ? capsule::cli::kExitOk : capsule::cli::kExitUsage;
  }
  return exit_code;
}
