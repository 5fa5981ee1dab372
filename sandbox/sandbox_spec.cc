#include "sandbox/sandbox_spec.h"

#include <sys/utsname.h>

#include <algorithm>
#include <cctype>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/layout.h"

namespace capsule::sandbox {

namespace {

// Bumped whenever the way a root file system is built changes what it holds.
constexpr int kBuilderVersion = 1;

std::vector<std::string> SortedUnique(std::vector<std::string> names) {
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

Result<std::vector<std::string>> StringList(const Json& spec, const char* field) {
  std::vector<std::string> out;
  auto it = spec.find(field);
  if (it == spec.end() || it->is_null()) return out;
  if (!it->is_array()) return Status::InvalidArgument(kEnvironmentSpecPath, std::string(field) + ": must be a list of names");
  for (const Json& item : *it) {
    if (!item.is_string()) return Status::InvalidArgument(kEnvironmentSpecPath, std::string(field) + ": " + item.dump() + " is not a name");
    out.push_back(item.get<std::string>());
  }
  return SortedUnique(std::move(out));
}

}  // namespace

const std::vector<ImageInfo>& SupportedImages() {
  static const std::vector<ImageInfo> images = {{"debian:12", "bookworm"}, {"debian:bookworm", "bookworm"}};
  return images;
}

bool IsPackageName(const std::string& name) {
  if (name.size() < 2 || !(std::islower(static_cast<unsigned char>(name[0])) || std::isdigit(static_cast<unsigned char>(name[0])))) {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '+' || c == '-' ||
           c == '.';
  });
}

Result<SandboxSpec> SandboxSpec::Parse(std::string_view text) {
  CAPSULE_RETURN_IF_ERROR(CheckEnvironmentSpec(text));
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, kEnvironmentSpecPath));
  SandboxSpec spec;
  if (auto image = json.find("image"); image != json.end() && !image->is_null()) {
    if (!image->is_string()) return Status::InvalidArgument(kEnvironmentSpecPath, "image: must be a string such as \"debian:12\"");
    spec.image = image->get<std::string>();
  }
  CAPSULE_ASSIGN_OR_RETURN(spec.packages, StringList(json, "packages"));
  for (const std::string& name : spec.packages) {
    if (!IsPackageName(name)) return Status::InvalidArgument(kEnvironmentSpecPath, "packages: \"" + name + "\" is not a Debian package name");
  }
  CAPSULE_ASSIGN_OR_RETURN(spec.secrets, StringList(json, "secrets"));
  if (auto env = json.find("env"); env != json.end() && env->is_object()) {
    for (const auto& [name, value] : env->items()) spec.env[name] = value.get<std::string>();  // checked strings
  }
  if (auto network = json.find("network"); network != json.end() && !network->is_null()) {
    if (!network->is_boolean()) return Status::InvalidArgument(kEnvironmentSpecPath, "network: must be true or false");
    spec.network = network->get<bool>();
  }
  for (const std::string& name : spec.secrets) {
    if (spec.env.count(name)) {
      return Status::InvalidArgument(kEnvironmentSpecPath, name + ": is both in \"env\" and in \"secrets\"");
    }
  }
  return spec;
}

Result<SandboxSpec> SandboxSpec::Load(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(JoinPath(dir, kEnvironmentSpecPath)));
  return Parse(text);
}

Result<std::string> SandboxSpec::Suite() const {
  for (const ImageInfo& info : SupportedImages()) {
    if (info.image == image) return info.suite;
  }
  return Status::InvalidArgument("image " + image,
                                 "not supported: a sandbox is built from Debian's packages with mmdebstrap, and the "
                                 "images supported are debian:12 (also named debian:bookworm)");
}

std::string SandboxSpec::Digest() const {
  struct utsname host {};
  ::uname(&host);
  // The suite, not the image's name: debian:12 and debian:bookworm are one root file system.
  Result<std::string> suite = Suite();
  Json what = {{"builder", kBuilderVersion}, {"machine", host.machine}, {"suite", suite.ok() ? *suite : image},
               {"packages", packages}};
  Result<std::string> canonical = CanonicalJson(what, "sandbox");
  return Sha256Hex(canonical.ok() ? *canonical : what.dump());
}

}  // namespace capsule::sandbox
