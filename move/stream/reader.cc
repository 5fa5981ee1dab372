#include "move/stream/reader.h"

#include <fcntl.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "move/stream/digest_check.h"

namespace capsule::move {

namespace {

constexpr uint64_t kMaxManifestSize = 1 << 20;

Status Refuse(const std::string& entry, const std::string& why) {
  return Status::Corruption("stream entry '" + entry + "'", why + "; the whole stream is refused");
}

Result<std::string> ExpectedDigest(const TarEntry& entry) {
  auto it = entry.pax.find(kDigestRecord);
  if (it == entry.pax.end()) return Refuse(entry.path, "no LNK.sha256 header");
  if (!IsSha256Hex(it->second)) return Refuse(entry.path, "LNK.sha256 is not a SHA-256 in hex");
  return it->second;
}

// An owner record of `entry` (LNK.uid, LNK.gid), when it has one: decimal, at most 32 bits.
Result<std::optional<uint32_t>> OwnerRecord(const TarEntry& entry, const char* record) {
  auto it = entry.pax.find(record);
  if (it == entry.pax.end()) return std::optional<uint32_t>();
  const std::string& text = it->second;
  if (text.empty() || text.size() > 10 || text.find_first_not_of("0123456789") != std::string::npos ||
      std::stoull(text) > UINT32_MAX) {
    return Refuse(entry.path, std::string(record) + " '" + text + "' is not a 32-bit owner number");
  }
  return std::optional<uint32_t>(static_cast<uint32_t>(std::stoull(text)));
}

// The journal's append records (LNK.append.size, LNK.append.sha256), both or neither: only
// on the journal of a switch.
Result<std::optional<ReceivedEntry::AppendTo>> AppendRecords(const TarEntry& entry, Phase phase) {
  auto size = entry.pax.find(kAppendSizeRecord);
  auto digest = entry.pax.find(kAppendDigestRecord);
  if (size == entry.pax.end() && digest == entry.pax.end()) return std::optional<ReceivedEntry::AppendTo>();
  if (entry.path != kStreamJournal || phase != Phase::kSwitch || entry.type != TarEntry::Type::kFile) {
    return Refuse(entry.path, "LNK.append records are for the journal of a switch only");
  }
  if (size == entry.pax.end() || digest == entry.pax.end()) {
    return Refuse(entry.path, "LNK.append.size and LNK.append.sha256 come together");
  }
  const std::string& text = size->second;
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos) {
    return Refuse(entry.path, "LNK.append.size '" + text + "' is not a size in decimal");
  }
  if (!IsSha256Hex(digest->second)) return Refuse(entry.path, "LNK.append.sha256 is not a SHA-256 in hex");
  return std::optional<ReceivedEntry::AppendTo>(ReceivedEntry::AppendTo{std::stoull(text), digest->second});
}

// Reads the current file's data into memory (small files: the manifest and the end).
Result<std::string> ReadSmallFile(TarReader* reader, const TarEntry& entry) {
  if (entry.size > kMaxManifestSize) return Refuse(entry.path, "too large");
  std::string data(static_cast<size_t>(entry.size), '\0');
  size_t done = 0;
  while (done < data.size()) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, reader->ReadData(data.data() + done, data.size() - done));
    if (n == 0) return Refuse(entry.path, "cut short");
    done += n;
  }
  return data;
}

Status CheckedSmallFile(TarReader* reader, const TarEntry& entry, std::string* data) {
  if (entry.type != TarEntry::Type::kFile) return Refuse(entry.path, "must be a regular file");
  CAPSULE_ASSIGN_OR_RETURN(std::string expected, ExpectedDigest(entry));
  CAPSULE_ASSIGN_OR_RETURN(*data, ReadSmallFile(reader, entry));
  if (Sha256Hex(*data) != expected) return Refuse(entry.path, "digest differs from its LNK.sha256");
  return Status::Ok();
}

// Where received files are written: the folders made so far (most files share their
// parent with the one before), and the buffers data passes through.
struct Landing {
  std::string into;
  std::string last_folder;
  std::vector<char> buffer = std::vector<char>(1 << 20);
  DigestCheck digests;  // for files written in place in a staging folder
};

Status ReceiveFile(TarReader* reader, const TarEntry& entry, Landing* landing, ReceivedEntry* out) {
  CAPSULE_ASSIGN_OR_RETURN(std::string expected, ExpectedDigest(entry));
  std::string target = JoinPath(landing->into, entry.path);
  std::string folder = DirName(target);
  if (folder != landing->last_folder) {
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(folder));
    landing->last_folder = std::move(folder);
  }
  uint64_t size = 0;
  out->sha256 = expected;
  if (StagingSync::Covers(target)) {
    // Inside a staging folder (the receivers' case) the folder is the temporary: a file is
    // written where it belongs, by the checking thread, which then hashes each piece, while
    // this one receives the next; a refused stream takes the whole folder with it.
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(target, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    // An empty file is done here (closed at once); any other holds a buffer while it is open.
    if (entry.size > 0) landing->digests.WriteFile(std::move(fd), target);
    fd.Reset();
    for (;;) {
      // A write that failed (a full disk) stops the stream at the next piece; ReadStream
      // names the first fault instead of this.
      if (landing->digests.WriteFailed()) return Status::IOError(target, "not received: a write failed");
      DigestCheck::Buffer* buffer = landing->digests.Take();
      Result<size_t> n = reader->ReadData(buffer->data(), buffer->size());
      if (!n.ok() || *n == 0) {
        landing->digests.Give(buffer);
        if (!n.ok()) return n.status();
        break;
      }
      landing->digests.Hash(buffer, *n);
      size += *n;
    }
    landing->digests.EndFile(entry.path, expected);
    out->size = size;
    return Status::Ok();
  }
  // Elsewhere each file is written whole or not at all.
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile atomic, AtomicFile::Create(target, 0644));
  Sha256 hasher;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, reader->ReadData(landing->buffer.data(), landing->buffer.size()));
    if (n == 0) break;
    std::string_view chunk(landing->buffer.data(), n);
    hasher.Update(chunk);
    CAPSULE_RETURN_IF_ERROR(atomic.Append(chunk));
    size += n;
  }
  if (hasher.FinishHex() != expected) return Refuse(entry.path, "digest differs from its LNK.sha256");
  CAPSULE_RETURN_IF_ERROR(atomic.Commit());
  out->size = size;
  return Status::Ok();
}

// A path beneath a link or a file would be written through the link wherever the workspace is
// laid out. Refuses `path` when it lies beneath a link or file of the stream, or when it is a
// link or file and an entry already lies beneath it.
Status CheckNotBeneath(const std::map<std::string, ReceivedEntry>& entries, const std::string& path, bool folder) {
  for (std::string dir = DirName(path); dir != "." && !dir.empty(); dir = DirName(dir)) {
    auto it = entries.find(dir);
    if (it != entries.end() && it->second.kind != ReceivedEntry::Kind::kFolder) {
      return Refuse(path, "lies beneath the link or file '" + dir + "'");
    }
  }
  if (!folder) {
    auto it = entries.lower_bound(path + "/");
    if (it != entries.end() && it->first.rfind(path + "/", 0) == 0) {
      return Refuse(it->first, "lies beneath the link or file '" + path + "'");
    }
  }
  return Status::Ok();
}

Result<ReceivedStream> ReadEntries(ByteSource* source, Landing* landing) {
  TarReader reader(source);
  ReceivedStream stream;
  TarEntry entry;
  CAPSULE_ASSIGN_OR_RETURN(bool any, reader.Next(&entry));
  if (!any) return Refuse(kStreamManifestName, "missing: the stream is empty");
  if (entry.path != kStreamManifestName) return Refuse(entry.path, "comes first, where lnk-move-4.json must be");
  std::string manifest_text;
  CAPSULE_RETURN_IF_ERROR(CheckedSmallFile(&reader, entry, &manifest_text));
  CAPSULE_ASSIGN_OR_RETURN(stream.manifest, StreamManifest::Parse(manifest_text));
  Phase phase = stream.manifest.phase;

  bool ended = false;
  for (;;) {
    Result<bool> more = reader.Next(&entry);
    if (!more.ok()) return Status::Corruption("stream", more.status().message() + "; the whole stream is refused");
    if (!*more) break;
    if (ended) return Refuse(entry.path, "comes after lnk-move-4.end");
    if (entry.path == kStreamEndName) {
      std::string end;
      CAPSULE_RETURN_IF_ERROR(CheckedSmallFile(&reader, entry, &end));
      if (!end.empty()) return Refuse(entry.path, "must be empty");
      ended = true;
      continue;
    }
    if (entry.path == kStreamManifestName) return Refuse(entry.path, "appears twice");
    CAPSULE_RETURN_IF_ERROR(CheckStreamPath(entry.path, phase).WithContext("refused"));
    if (stream.entries.count(entry.path)) return Refuse(entry.path, "duplicate entry");
    CAPSULE_RETURN_IF_ERROR(CheckNotBeneath(stream.entries, entry.path, entry.type == TarEntry::Type::kDirectory));
    ReceivedEntry received;
    received.mode = entry.mode & 0777;  // never setuid, setgid or sticky from a stream
    CAPSULE_ASSIGN_OR_RETURN(received.uid, OwnerRecord(entry, kUidRecord));
    CAPSULE_ASSIGN_OR_RETURN(received.gid, OwnerRecord(entry, kGidRecord));
    CAPSULE_ASSIGN_OR_RETURN(received.append_to, AppendRecords(entry, phase));
    switch (entry.type) {
      case TarEntry::Type::kDirectory:
        received.kind = ReceivedEntry::Kind::kFolder;
        break;
      case TarEntry::Type::kSymlink:
        CAPSULE_RETURN_IF_ERROR(CheckStreamLink(entry.path, entry.link_target, phase));
        received.kind = ReceivedEntry::Kind::kLink;
        received.link_target = entry.link_target;
        break;
      case TarEntry::Type::kFile:
        CAPSULE_RETURN_IF_ERROR(ReceiveFile(&reader, entry, landing, &received));
        stream.file_bytes += received.size;
        break;
      case TarEntry::Type::kHardLink: {
        auto earlier = stream.entries.find(entry.link_target);
        if (earlier == stream.entries.end() || earlier->second.kind != ReceivedEntry::Kind::kFile) {
          return Refuse(entry.path, "a hard link to '" + entry.link_target +
                                        "', which is not an earlier regular file of the stream");
        }
        if (entry.path.rfind("files/", 0) != 0 || entry.link_target.rfind("files/", 0) != 0) {
          return Refuse(entry.path, "a hard link outside files/");
        }
        received = earlier->second;  // one file under two names: the same content, mode and owner
        received.kind = ReceivedEntry::Kind::kHardLink;
        received.link_target = entry.link_target;
        break;
      }
      case TarEntry::Type::kFifo:
      case TarEntry::Type::kCharDevice:
      case TarEntry::Type::kBlockDevice:
        return Refuse(entry.path, std::string("a ") + TarTypeName(entry) +
                                      " as a tar entry (format 4's tar holds only files, folders, links and hard "
                                      "links; FIFOs and devices travel in the stream manifest's \"special\")");
      default:
        return Refuse(entry.path, std::string("a ") + TarTypeName(entry) +
                                      " (only files, folders, links and hard links may travel)");
    }
    stream.entries[entry.path] = std::move(received);
  }
  if (!ended) return Refuse(kStreamEndName, "missing: the stream was cut short");
  // The manifest's FIFOs and devices, as entries of the workspace they are.
  for (const auto& [path, special] : stream.manifest.special) {
    if (stream.entries.count(path)) return Refuse(path, "duplicate entry (a special file of the manifest, and in the tar)");
    CAPSULE_RETURN_IF_ERROR(CheckNotBeneath(stream.entries, path, false));
    ReceivedEntry received;
    received.kind = ReceivedEntry::Kind::kSpecial;
    received.mode = special.mode;
    received.special = special.type;
    received.dev_major = special.dev_major;
    received.dev_minor = special.dev_minor;
    received.uid = special.uid;
    received.gid = special.gid;
    stream.entries[path] = std::move(received);
  }
  Status trailer = reader.ExpectOnlyZerosAfterEnd();
  if (!trailer.ok()) return Refuse(kStreamEndName, "bytes follow the end of the stream");
  return stream;
}

}  // namespace

Result<ReceivedStream> ReadStream(ByteSource* source, const std::string& into) {
  Landing landing;
  landing.into = into;
  Result<ReceivedStream> stream = ReadEntries(source, &landing);
  // Every file before the one the stream ended at, or failed at, has been handed over to be
  // written and hashed: a write that failed or a file that differs came first, and is the
  // fault to name (DigestCheck keeps only the first of the two).
  std::optional<std::string> differed = landing.digests.Finish();
  CAPSULE_RETURN_IF_ERROR(landing.digests.Written());
  if (differed) return Refuse(*differed, "digest differs from its LNK.sha256");
  return stream;
}

}  // namespace capsule::move
