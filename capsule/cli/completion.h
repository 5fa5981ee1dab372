// Shell completion scripts for bash, zsh and fish, generated from the command line's definition:
// every command and group, and each command's options (hidden ones, the old spellings kept for
// a while, left out), so that completion knows what the parser knows.
//
// Thread-safety: reads `app` only.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace capsule::cli {

// The script for `shell` ("bash", "zsh" or "fish"); empty for any other.
std::string CompletionScript(const CLI::App& app, const std::string& shell);

}  // namespace capsule::cli
