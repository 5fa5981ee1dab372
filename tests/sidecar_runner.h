// A real `capsule serve` for end-to-end tests: ./capsule (from the test's runfiles) run in a
// child on 127.0.0.1 with a free port, read from its first line ("listening on HOST:PORT").
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "capsule/base/file_io.h"

namespace capsule::testing {

// What two sidecars need to move agents between them: certificates from tests/make_pki.sh in
// `pki` and an X25519 sealing key at `seal_key`. False if either could not be made.
bool MakeMoveKeys(const std::string& pki, const std::string& seal_key);

class Sidecar {
 public:
  // Serves `root` with the certificates tests/make_pki.sh made in `pki` and the sealing key
  // `seal_key`; `extra_args` go after those (--mount-to DIR, --sandbox-cache DIR). Its
  // standard error (the sidecar's log) is appended to `log` when one is named.
  Sidecar(const std::string& root, const std::string& pki, const std::string& seal_key,
          const std::vector<std::string>& extra_args = {}, const std::string& log = "");
  ~Sidecar() { Stop(); }
  Sidecar(const Sidecar&) = delete;
  Sidecar& operator=(const Sidecar&) = delete;

  // SIGTERM, then waits for it; a second call does nothing.
  void Stop();
  // The next line it printed on standard output after "listening on" ("seal key HEX",
  // "metrics on HOST:PORT"), without its end; "" at the end.
  std::string NextLine();
  const std::string& address() const { return address_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  UniqueFd out_;  // its standard output, kept open so that it never writes into a closed pipe
  std::string address_;
};

}  // namespace capsule::testing
