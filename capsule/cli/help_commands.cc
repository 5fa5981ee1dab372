// capsule help [COMMAND...] and capsule completion bash|zsh|fish: both read the command line's
// own definition (every command, option and flag registered before them), so that what they
// say cannot drift from what the parser takes.
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "capsule/cli/cli.h"
#include "capsule/cli/completion.h"

namespace capsule::cli {

namespace {

// The command `words` names beneath `app` ("stream unpack": stream, then its unpack); null
// for a word that names none.
const CLI::App* CommandNamed(const CLI::App& app, const std::vector<std::string>& words) {
  const CLI::App* at = &app;
  for (const std::string& word : words) {
    const CLI::App* next = nullptr;
    for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) {
      if (sub->get_name() == word) next = sub;
    }
    if (next == nullptr) return nullptr;
    at = next;
  }
  return at;
}

int RunHelp(const CLI::App& app, const std::vector<std::string>& words) {
  const CLI::App* command = CommandNamed(app, words);
  if (command == nullptr) {
    std::string named;
    for (const std::string& word : words) named += (named.empty() ? "" : " ") + word;
    return Fail(Status::InvalidArgument("help", "'" + named + "' is not a command (capsule help lists them)"));
  }
  std::cout << command->help();
  return std::cout.flush() ? kExitOk : Fail("standard output: write failed");
}

int RunCompletion(const CLI::App& app, const std::string& shell) {
  std::cout << CompletionScript(app, shell);
  return std::cout.flush() ? kExitOk : Fail("standard output: write failed");
}

}  // namespace

void RegisterHelpCommands(CLI::App& app, int* exit_code) {
  auto words = std::make_shared<std::vector<std::string>>();
  CLI::App* help = app.add_subcommand("help", "Print the help of capsule, or of COMMAND (capsule help stream unpack)");
  help->add_option("COMMAND", *words, "A command, and a command of its group");
  CLI::App* root = &app;
  help->callback([root, words, exit_code] { *exit_code = RunHelp(*root, *words); });

  auto shell = std::make_shared<std::string>();
  CLI::App* completion = app.add_subcommand(
      "completion", "Print the shell completion script for bash, zsh or fish (packages install it; or: "
                    "source <(capsule completion bash))");
  completion->add_option("SHELL", *shell, "bash, zsh or fish")->required()->check(OneOf({"bash", "zsh", "fish"}));
  completion->callback([root, shell, exit_code] { *exit_code = RunCompletion(*root, *shell); });
}

}  // namespace capsule::cli
