// environment/spec.json: how to rebuild the agent's sandbox. It lists secrets by name only.
//
// Form: a JSON object. "env" (at any depth) maps environment variable names to string values;
// "secrets" is a list of variable names whose values the host supplies for one run. The whole
// spec is refused when it would carry a secret value into the capsule: a variable in an "env"
// whose name, in any case, is KEY, contains TOKEN, SECRET, PASSWORD, APIKEY or API_KEY, or
// ends in _KEY; or any string value holding a URL with a password (scheme://user:pass@host).
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule {

// True for a variable name that may only be listed under "secrets".
bool IsSecretVariableName(std::string_view name);

// True for a string holding a URL with a password in it (scheme://user:password@...).
bool HoldsUrlWithPassword(std::string_view value);

// Checks the text of an environment spec; the error names the variable and why.
Status CheckEnvironmentSpec(std::string_view text);

// The spec a new capsule starts with.
std::string DefaultEnvironmentSpec();

}  // namespace capsule
