// Reading a Move Stream (format 4) defensively, in constant memory.
//
// Every fault refuses the whole stream, with an error naming the entry and the reason: a
// missing or misplaced manifest or end, another format, a digest that differs or is missing,
// a path the phase does not allow, a link that escapes, an entry that is not a file, folder,
// link, hard link to an earlier file, or FIFO or device under files/, a duplicate, an entry beneath a link or file of the stream, a header or size that
// lies, a stream cut short, bytes after the end.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/status.h"
#include "capsule/base/tar.h"
#include "move/stream/format.h"

namespace capsule::move {

struct ReceivedEntry {
  // kHardLink: another name of the earlier regular file `link_target` (a stream path).
  // kSpecial: a FIFO or a device node, metadata only (from the manifest's "special").
  enum class Kind { kFolder, kFile, kLink, kHardLink, kSpecial } kind = Kind::kFile;
  mode_t mode = 0644;
  std::string sha256;  // kFile, checked against what was written
  uint64_t size = 0;
  std::string link_target;
  TarEntry::Type special = TarEntry::Type::kFifo;  // kSpecial
  uint32_t dev_major = 0, dev_minor = 0;            // kSpecial devices
  std::optional<uint32_t> uid, gid;  // LNK.uid / LNK.gid, when the entry had them
  // The journal of a switch may hold only what follows what the receiver holds: the size and
  // SHA-256 of the journal these bytes are appended to (LNK.append.size, LNK.append.sha256).
  struct AppendTo {
    uint64_t size = 0;
    std::string sha256;
  };
  std::optional<AppendTo> append_to;
};

struct ReceivedStream {
  StreamManifest manifest;
  std::map<std::string, ReceivedEntry> entries;  // by stream path
  uint64_t file_bytes = 0;
};

// Reads the whole stream from `source`, writing each file under the folder `into` at its
// stream path (links are recorded, never created). On failure `into` may hold part of the
// stream: it is a staging folder, and the caller removes it.
Result<ReceivedStream> ReadStream(ByteSource* source, const std::string& into);

}  // namespace capsule::move
