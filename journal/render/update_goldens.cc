// Rewrites journal/render/testdata/*.json from the scripts, deliberately:
//
//   bazel run //journal/render:update_goldens
//
// then review the diff (git diff journal/render/testdata) before committing it. The golden
// test (render_test) only compares and never writes.
#include <cstdlib>
#include <iostream>

#include "capsule/base/file_io.h"
#include "journal/render/test_util.h"

int main() {
  using namespace capsule::journal::render::testing;
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  if (workspace == nullptr || *workspace == '\0') {
    std::cerr << "update_goldens: run it with `bazel run //journal/render:update_goldens`\n";
    return 2;
  }
  std::string dir = std::string(workspace) + "/journal/render/testdata/";
  for (const GoldenCase& golden : GoldenCases()) {
    capsule::Result<std::string> script = capsule::ReadFile(dir + golden.script + ".jsonl");
    if (!script.ok()) {
      std::cerr << "update_goldens: " << script.status().message() << "\n";
      return 1;
    }
    capsule::Result<std::string> text = RenderGolden(golden, *script);
    if (!text.ok()) {
      std::cerr << "update_goldens: " << golden.name << ": " << text.status().message() << "\n";
      return 1;
    }
    capsule::Status written = capsule::WriteFileAtomic(dir + golden.name + ".json", *text);
    if (!written.ok()) {
      std::cerr << "update_goldens: " << written.message() << "\n";
      return 1;
    }
    std::cout << "wrote " << dir << golden.name << ".json\n";
  }
  return 0;
}
