// Usage errors in words (man capsule.1, CONVENTIONS): option checks that say what a value must
// be, and the nearest subcommand for a mistyped one.
#include <algorithm>
#include <cstdlib>
#include <iostream>
// GCC 12 at -O1 with the sanitizers warns of a std::function in <regex> "maybe used
// uninitialized" where it is not (a false positive inside libstdc++'s own code).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop

#include "capsule/cli/cli.h"

namespace capsule::cli {

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

namespace {

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

}  // namespace

std::string UnknownSubcommand(const CLI::App& app, int argc, char** argv) {
  const CLI::App* at = &app;
  bool options = false;
  for (int i = 1; i < argc; ++i) {
    std::string word = argv[i];
    if (word == "-h" || word == "--help" || word == "--version" || word == "-V") return "";
    if (!word.empty() && word[0] == '-') {
      options = true;  // --json, say: a group's missing command is still found below
      continue;
    }
    if (options || word.empty()) return "";  // after an option, maybe its value: CLI11 judges
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
  // Every word named a command, and the last one needs one more (capsule stream): say which.
  if (at->get_require_subcommand_min() == 0) return "";
  std::string names;
  for (const CLI::App* sub : at->get_subcommands([](const CLI::App*) { return true; })) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  std::string command = at == &app ? "capsule" : "capsule " + at->get_name();
  return (at == &app ? "" : at->get_name() + ": ") + "which command? one of " + names + " (" + command +
         " --help says what each does)";
}

std::string UsageInWords(const std::string& parser_message) {
  // The parser's own phrasings (CLI11), said as the rest of the command line says things.
  static const std::vector<std::pair<std::regex, std::string>> kPhrasings = {
      {std::regex("^(\\S+): At Most 1 required but received \\d+$"), "$1 is given more than once; give it once"},
      {std::regex("^(\\S+): At Most (\\d+) required but received (\\d+)$"), "$1 takes at most $2 values, got $3"},
      {std::regex("^(\\S+): At least (\\d+) required but received (\\d+)$"), "$1 takes at least $2 values, got $3"},
      {std::regex("^Expected (exactly|at least) (\\d+) arguments? to (\\S+), got (\\d+)$"), "$3 needs a value"},
      {std::regex("^The following arguments? (was|were) not expected: (.*)$"), "unexpected: $2 (--help says what it takes)"},
      {std::regex("^A subcommand is required$"), "which command? (capsule --help lists them)"},
      {std::regex("^(\\S+) excludes (\\S+)$"), "$1 and $2 do not go together"},
      {std::regex("^(\\S+) requires (\\S+)$"), "$1 needs $2 too"},
      {std::regex("^(\\S+) was given a disallowed flag override$"), "$1 takes no value"},
  };
  for (const auto& [pattern, words] : kPhrasings) {
    if (std::regex_match(parser_message, pattern)) return std::regex_replace(parser_message, pattern, words);
  }
  return parser_message;
}

int UsageFailure(const std::string& parser_message, int argc, char** argv) {
  const std::string message = UsageInWords(parser_message);
  std::cerr << "capsule: " << message << "\n";
  bool json = JsonOutput();
  for (int i = 1; i < argc && !json; ++i) json = std::string(argv[i]) == "--json" || std::string(argv[i]) == "-j";
  if (json) PrintJsonError("usage", message, Json());
  return kExitUsage;
}

}  // namespace capsule::cli
