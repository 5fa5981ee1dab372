#include <iostream>

#include "capsule/cli/cli.h"

namespace capsule::cli {

int Fail(const Status& status) { return Fail(status.message()); }

int Fail(const std::string& message) {
  std::cerr << "capsule: " << message << "\n";
  return kExitFailed;
}

}  // namespace capsule::cli
