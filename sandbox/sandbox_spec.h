// What environment/spec.json asks of a run: the sandbox's image and packages, whether it may
// reach the network, the variables it sets and the secrets (by name) the host supplies.
// man/capsule.5 (environment/spec.json) describes the same fields.
//
//   {"env": {"NAME": "value"}, "image": "debian:12", "network": false,
//    "packages": ["hello"], "secrets": ["OPENAI_API_KEY"]}
//
// Thread-safety: a value.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "capsule/base/status.h"

namespace capsule::sandbox {

// The images a sandbox can be built from, with the Debian suite each is bootstrapped from.
struct ImageInfo {
  std::string image;  // "debian:12"
  std::string suite;  // "bookworm"
};
const std::vector<ImageInfo>& SupportedImages();

struct SandboxSpec {
  std::string image = "debian:12";
  std::vector<std::string> packages;         // sorted, each once
  std::map<std::string, std::string> env;    // the top-level "env"
  std::vector<std::string> secrets;          // names, sorted, each once
  bool network = false;

  // Reads the spec's text: first the checks every spec passes (CheckEnvironmentSpec: no
  // secret value in it), then the fields above. InvalidArgument names the field.
  static Result<SandboxSpec> Parse(std::string_view text);
  // Reads DIR/environment/spec.json.
  static Result<SandboxSpec> Load(const std::string& dir);

  // The Debian suite of `image`; InvalidArgument naming the image and what is supported.
  Result<std::string> Suite() const;
  // The SHA-256 (hex) of everything that determines the root file system: the builder's
  // version, the machine's architecture, the image and the packages. Two agents whose specs
  // agree on these share one sandbox.
  std::string Digest() const;
};

// A Debian package name as apt takes it: [a-z0-9][a-z0-9+.-]+.
bool IsPackageName(const std::string& name);

}  // namespace capsule::sandbox
