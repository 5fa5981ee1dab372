#include "sandbox/keychain.h"

#include <keyutils.h>
#include <stdlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

namespace capsule::sandbox {

namespace {

constexpr char kKeyType[] = "user";

// A buffer libkeyutils allocated; freed (and a secret's bytes wiped) when dropped.
struct KeyBufferFree {
  size_t size = 0;
  void operator()(void* buffer) const {
    if (buffer != nullptr) explicit_bzero(buffer, size);
    ::free(buffer);
  }
};
using KeyBuffer = std::unique_ptr<char, KeyBufferFree>;

std::string Prefix(const std::string& agent) { return "capsule:" + agent + ":"; }

// The keys of the user keyring whose description is `prefix` followed by a name: (id, name).
Result<std::vector<std::pair<key_serial_t, std::string>>> KeysOf(const std::string& prefix) {
  void* raw = nullptr;
  long size = ::keyctl_read_alloc(KEY_SPEC_USER_KEYRING, &raw);
  if (size < 0) return Status::IOError("the user keyring (@u)", errno);
  KeyBuffer list(static_cast<char*>(raw), KeyBufferFree{static_cast<size_t>(size)});
  std::vector<std::pair<key_serial_t, std::string>> out;
  for (long i = 0; i + static_cast<long>(sizeof(key_serial_t)) <= size; i += sizeof(key_serial_t)) {
    key_serial_t id;
    std::memcpy(&id, list.get() + i, sizeof(id));
    char* description = nullptr;
    if (::keyctl_describe_alloc(id, &description) < 0) continue;  // gone, or not ours to see
    std::unique_ptr<char, decltype(&::free)> owned(description, &::free);
    // "type;uid;gid;perm;description"
    std::string text(description);
    size_t start = 0;
    for (int field = 0; field < 4 && start != std::string::npos; ++field) {
      size_t semicolon = text.find(';', start);
      start = semicolon == std::string::npos ? semicolon : semicolon + 1;
    }
    if (start == std::string::npos || text.compare(0, 5, "user;") != 0) continue;
    std::string name = text.substr(start);
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    out.emplace_back(id, name.substr(prefix.size()));
  }
  return out;
}

Result<key_serial_t> Find(const std::string& agent, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(auto keys, KeysOf(Prefix(agent)));
  for (const auto& [id, key_name] : keys) {
    if (key_name == name) return id;
  }
  return Status::NotFound("secret " + name + " of agent " + agent, "not in this machine's keychain (capsule secret set)");
}

}  // namespace

std::string SecretKeyName(const std::string& agent, const std::string& name) { return Prefix(agent) + name; }

Status SetSecret(const std::string& agent, const std::string& name, const std::string& value) {
  std::string description = SecretKeyName(agent, name);
  key_serial_t id = ::add_key(kKeyType, description.c_str(), value.data(), value.size(), KEY_SPEC_USER_KEYRING);
  if (id < 0) return Status::IOError("secret " + name + " of agent " + agent, errno);
  // The user's own processes may read it, whatever session keyring they run in; no one else.
  key_perm_t perm = KEY_POS_ALL | KEY_USR_VIEW | KEY_USR_READ | KEY_USR_WRITE | KEY_USR_SEARCH | KEY_USR_LINK |
                    KEY_USR_SETATTR;
  if (::keyctl_setperm(id, perm) < 0) return Status::IOError("secret " + name + " of agent " + agent, errno);
  return Status::Ok();
}

Status RemoveSecret(const std::string& agent, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(key_serial_t id, Find(agent, name));
  if (::keyctl_unlink(id, KEY_SPEC_USER_KEYRING) < 0) return Status::IOError("secret " + name + " of agent " + agent, errno);
  (void)::keyctl_invalidate(id);  // gone at once from any other keyring that linked it
  return Status::Ok();
}

Result<std::string> GetSecret(const std::string& agent, const std::string& name) {
  CAPSULE_ASSIGN_OR_RETURN(key_serial_t id, Find(agent, name));
  void* raw = nullptr;
  long size = ::keyctl_read_alloc(id, &raw);
  if (size < 0) return Status::IOError("secret " + name + " of agent " + agent, errno);
  KeyBuffer value(static_cast<char*>(raw), KeyBufferFree{static_cast<size_t>(size)});
  return std::string(value.get(), static_cast<size_t>(size));
}

Result<std::vector<std::string>> ListSecrets(const std::string& agent) {
  CAPSULE_ASSIGN_OR_RETURN(auto keys, KeysOf(Prefix(agent)));
  std::vector<std::string> names;
  for (auto& key : keys) names.push_back(std::move(key.second));
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

}  // namespace capsule::sandbox
