#include "capsule/base/temp_dir.h"

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>

namespace capsule::testing {

std::string MakeTempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/" + name + ".XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    std::perror(("mkdtemp " + pattern).c_str());
    std::abort();
  }
  return pattern;
}

}  // namespace capsule::testing
