// The host's keychain for an agent's secrets: the Linux kernel keyring (keyrings(7)), through
// libkeyutils. Each secret is a "user" key in the user keyring (@u) of the calling user,
// described "capsule:<agent-id>:<NAME>", readable by that user's processes only. A value
// lives there and in the memory of the one run that asks for it; never in a file.
//
// Thread-safety: stateless; safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::sandbox {

// The key's description: "capsule:<agent>:<name>".
std::string SecretKeyName(const std::string& agent, const std::string& name);

// Stores (or replaces) the value of secret `name` of `agent`.
Status SetSecret(const std::string& agent, const std::string& name, const std::string& value);
// Removes it; NotFound when the keychain has no such secret.
Status RemoveSecret(const std::string& agent, const std::string& name);
// The value; NotFound "secret NAME of agent AGENT: not in this machine's keychain".
Result<std::string> GetSecret(const std::string& agent, const std::string& name);
// The names of the agent's secrets in the keychain, sorted.
Result<std::vector<std::string>> ListSecrets(const std::string& agent);

}  // namespace capsule::sandbox
