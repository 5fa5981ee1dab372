// Exporting a capsule as a deterministic tar (capsule/format/import.h reads one back).
//
// The export: manifest.json first, then signature.json when signed, then every folder and
// file of the capsule in byte order of their paths (folders before what they hold); mode 0644
// for files and 0755 for folders, owner 0/0 (root), time 0, pax headers for long names. The
// same state always gives the same bytes. .capsule/ never goes in. A capsule that does not
// match its manifest is not exported.
#pragma once

#include <optional>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/progress.h"
#include "capsule/base/status.h"

namespace capsule {

struct ExportOptions {
  std::optional<std::string> signing_key_path;  // Ed25519 private key file
  Progress* progress = nullptr;                 // phase "export": file bytes and files written
};

// Writes the export of `dir` to `out_path`: "-" for standard output, in place for a FIFO or a
// device, else through the durable-write path (see OutputFile). Refuses an output inside
// `dir`, which would be taken for part of the capsule.
Status ExportCapsule(const std::string& dir, const std::string& out_path, const ExportOptions& options);
// The same export into any sink.
Status WriteCapsuleTar(const std::string& dir, const ExportOptions& options, ByteSink* sink);

}  // namespace capsule
