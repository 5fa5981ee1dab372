// Tests only: a fresh temporary folder for a test, under $TEST_TMPDIR (Bazel's per-test
// folder) or /tmp. Every test of the project makes its folders here.
#pragma once

#include <string>

namespace capsule::testing {

// A new, empty folder named NAME.XXXXXX; aborts the test program when none can be made.
std::string MakeTempDir(const std::string& name);

}  // namespace capsule::testing
