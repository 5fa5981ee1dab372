#include "capsule/format/environment_spec.h"

#include <algorithm>
#include <cctype>

#include "capsule/base/canonical_json.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

bool EndsWith(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool IsVariableName(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

Status CheckNode(const Json& node, const std::string& where) {
  if (node.is_string() && HoldsUrlWithPassword(node.get<std::string>())) {
    return Status::InvalidArgument(kEnvironmentSpecPath, (where.empty() ? std::string("the spec") : where) +
                                                             ": holds a URL with a password; name it under \"secrets\"");
  }
  if (node.is_array()) {
    for (size_t i = 0; i < node.size(); ++i) {
      CAPSULE_RETURN_IF_ERROR(CheckNode(node[i], where + "[" + std::to_string(i) + "]"));
    }
    return Status::Ok();
  }
  if (!node.is_object()) return Status::Ok();
  for (const auto& [key, value] : node.items()) {
    std::string path = where.empty() ? key : where + "." + key;
    if (key == "env") {
      if (!value.is_object()) return Status::InvalidArgument(kEnvironmentSpecPath, path + ": must be an object of NAME: value");
      for (const auto& [name, setting] : value.items()) {
        std::string var = path + "." + name;
        if (IsSecretVariableName(name)) {
          return Status::InvalidArgument(
              kEnvironmentSpecPath,
              var + ": carries a secret value; list \"" + name + "\" under \"secrets\" by name only");
        }
        if (!setting.is_string()) return Status::InvalidArgument(kEnvironmentSpecPath, var + ": value must be a string");
        if (HoldsUrlWithPassword(setting.get<std::string>())) {
          return Status::InvalidArgument(kEnvironmentSpecPath, var + ": holds a URL with a password; list \"" + name +
                                                                   "\" under \"secrets\" by name only");
        }
      }
    } else if (key == "secrets") {
      if (!value.is_array()) return Status::InvalidArgument(kEnvironmentSpecPath, path + ": must be a list of names");
      for (const Json& name : value) {
        if (!name.is_string() || !IsVariableName(name.get<std::string>())) {
          return Status::InvalidArgument(kEnvironmentSpecPath,
                                         path + ": " + name.dump() + " is not a variable name (secrets are listed by name, never value)");
        }
      }
    } else {
      CAPSULE_RETURN_IF_ERROR(CheckNode(value, path));
    }
  }
  return Status::Ok();
}

}  // namespace

bool IsSecretVariableName(std::string_view name) {
  std::string upper(name);
  std::transform(upper.begin(), upper.end(), upper.begin(),
                 [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  auto contains = [&](std::string_view part) { return upper.find(part) != std::string::npos; };
  return upper == "KEY" || contains("TOKEN") || contains("SECRET") || contains("PASSWORD") || contains("APIKEY") ||
         contains("API_KEY") || EndsWith(upper, "_KEY");
}

bool HoldsUrlWithPassword(std::string_view value) {
  // Each "://" starts an authority; a password is a ':' before an '@' within it.
  for (size_t scheme = value.find("://"); scheme != std::string_view::npos; scheme = value.find("://", scheme + 3)) {
    size_t start = scheme + 3;
    size_t end = value.find_first_of("/?# \t\n\"'", start);
    std::string_view authority = value.substr(start, end == std::string_view::npos ? end : end - start);
    size_t at = authority.rfind('@');
    if (at == std::string_view::npos) continue;
    size_t colon = authority.substr(0, at).find(':');
    if (colon != std::string_view::npos && colon + 1 < at) return true;
  }
  return false;
}

Status CheckEnvironmentSpec(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(Json spec, ParseJson(text, kEnvironmentSpecPath));
  if (!spec.is_object()) return Status::InvalidArgument(kEnvironmentSpecPath, "must be a JSON object");
  return CheckNode(spec, "");
}

std::string DefaultEnvironmentSpec() {
  return R"({"env":{},"image":"debian:12","packages":[],"secrets":[]})";
}

}  // namespace capsule
