// Importing a capsule exported as a tar (capsule/format/export.h).
//
// The import: refuses absolute paths, '..', links, hard links, devices, FIFOs, duplicate
// entries, .capsule/ and a tar cut short; verifies the whole capsule in a staging folder; and
// only then places it, in one rename (complete or absent).
//
// Thread-safety: a free function; the caller keeps others from writing `dir`.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "capsule/format/verify.h"

namespace capsule {

struct ImportOptions {
  bool adopt = false;  // make this machine the holder at a fresh epoch
  // The journal check verify runs on the staged capsule; its `progress`, when set, also
  // counts the extraction (phase "extract": the tar's bytes read, of its size, and files).
  VerifyOptions verify;
};

// Places the capsule exported in `tar_path` at `dir` (absent or empty). When the staged
// capsule fails verification, `problems` (when given) receives one line per problem.
Status ImportCapsule(const std::string& tar_path, const std::string& dir, const ImportOptions& options,
                     std::vector<std::string>* problems = nullptr);

}  // namespace capsule
