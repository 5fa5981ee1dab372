// tests/fake_target.py run in a child for end-to-end tests of the source: a target sidecar on
// 127.0.0.1 (a free port, read from its first line) that misbehaves as its mode says.
#pragma once

#include <sys/types.h>

#include <string>

#include "capsule/base/file_io.h"

namespace capsule::testing {

class FakeTarget {
 public:
  // Serves with the certificates tests/make_pki.sh made in `pki` (a sidecar's: server.pem),
  // in `mode` with `arg` (see tests/fake_target.py); what it logs is appended to `log`.
  FakeTarget(const std::string& pki, const std::string& mode, const std::string& arg, const std::string& log);
  ~FakeTarget();
  FakeTarget(const FakeTarget&) = delete;
  FakeTarget& operator=(const FakeTarget&) = delete;

  const std::string& address() const { return address_; }

 private:
  pid_t pid_ = -1;
  UniqueFd out_;
  std::string address_;
};

}  // namespace capsule::testing
