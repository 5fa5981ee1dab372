// environment/spec.json: how to rebuild the agent's sandbox. It lists secrets by name only.
//
// Form: a JSON object. "env" (at any depth) maps environment variable names to string values;
// "secrets" is a list of variable names whose values the host supplies for one run. A variable
// in an "env" whose name is TOKEN or KEY, or ends in _TOKEN, _KEY, _SECRET or _PASSWORD
// (any case) would carry a secret value into the capsule, and the whole spec is refused.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

// True for a variable name that may only be listed under "secrets".
bool IsSecretVariableName(std::string_view name);

// Checks the text of an environment spec; the error names the variable and why.
Status CheckEnvironmentSpec(std::string_view text);

// The spec a new capsule starts with.
std::string DefaultEnvironmentSpec();

}  // namespace capsule
