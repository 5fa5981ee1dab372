#include "journal/test_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "capsule/base/file_io.h"
#include "capsule/format/create.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"

namespace capsule::journal::testing {

namespace {

Status SetMachine(const std::string& dir, const std::string& machine) {
  return WriteFileAtomic(JoinPath(dir, local::kMachine), machine + "\n");
}

}  // namespace

std::string MachineName(int n) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), "m-%016x", n);
  return buffer;
}

Status MakeTestCapsule(const std::string& dir, const std::string& machine) {
  CreateOptions options;
  options.agent.id = "agent-1";
  options.agent.name = "Test agent";
  CAPSULE_RETURN_IF_ERROR(CreateCapsule(dir, options));
  return SetMachine(dir, machine);
}

Status CopyCapsuleAs(const std::string& from, const std::string& to, const std::string& machine) {
  std::error_code error;
  std::filesystem::copy(from, to, std::filesystem::copy_options::recursive, error);
  if (error) return Status::IOError("copy " + from + " to " + to, error.message());
  CAPSULE_RETURN_IF_ERROR(AdoptCopy(to).status());  // a copy is held once adopted
  return SetMachine(to, machine);
}

JournalOptions FixedTimeOptions(bool sync) {
  JournalOptions options;
  options.sync = sync;
  options.now = [] { return std::string("2026-12-02T16:40:00Z"); };
  return options;
}

}  // namespace capsule::journal::testing
