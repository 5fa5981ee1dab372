// capsule render: the journal as one provider's request body (man/capsule.1, `render`).
//   capsule render DIR [--provider openai|anthropic|gemini] [--model M] [--context-tokens N]
//                      [--conversation NAME] [--max-tokens N] [--pretty]
//
// Thread-safety: registration happens once, before parsing, on the main thread.
#pragma once

#include <CLI/CLI.hpp>

namespace capsule::cli {

void RegisterRenderCommands(CLI::App& app, int* exit_code);

}  // namespace capsule::cli
