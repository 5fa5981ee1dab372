// Exporting a capsule as a deterministic tar, and importing one back.
//
// The export: manifest.json first, then signature.json when signed, then every folder and
// file of the capsule in byte order of their paths (folders before what they hold); mode 0644
// for files and 0755 for folders, owner 0/0 (root), time 0, pax headers for long names. The
// same state always gives the same bytes. .capsule/ never goes in. A capsule that does not
// match its manifest is not exported.
//
// The import: refuses absolute paths, '..', links, hard links, devices, FIFOs, duplicate
// entries, .capsule/ and a tar cut short; verifies the whole capsule in a staging folder; and
// only then places it, in one rename (complete or absent).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capsule/byte_stream.h"
#include "capsule/status.h"
#include "capsule/verify.h"

namespace capsule {

struct ExportOptions {
  std::optional<std::string> signing_key_path;  // Ed25519 private key file
};

// Writes the export of `dir` to `out_path` through the durable-write path.
Status ExportCapsule(const std::string& dir, const std::string& out_path, const ExportOptions& options);
// The same export into any sink.
Status WriteCapsuleTar(const std::string& dir, const ExportOptions& options, ByteSink* sink);

struct ImportOptions {
  bool adopt = false;  // make this machine the holder at a fresh epoch
  // The journal check verify runs on the staged capsule.
  VerifyOptions verify;
};

// Places the capsule exported in `tar_path` at `dir` (absent or empty). When the staged
// capsule fails verification, `problems` (when given) receives one line per problem.
Status ImportCapsule(const std::string& tar_path, const std::string& dir, const ImportOptions& options,
                     std::vector<std::string>* problems = nullptr);

}  // namespace capsule
