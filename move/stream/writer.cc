#include "move/stream/writer.h"

#include <fcntl.h>

#include <map>
#include <optional>
#include <set>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/base/version.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/holder.h"
#include "capsule/format/schedule.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/trust.h"
#include "move/stream/digest_check.h"
#include "move/stream/plan.h"

namespace capsule::move {

namespace {

constexpr uint64_t kMaxSpecBytes = 16 << 20;

// The owner records of a planned entry (none when the snapshot names no owner).
std::map<std::string, std::string> OwnerRecords(const Planned& item) {
  std::map<std::string, std::string> pax;
  if (item.uid) pax[kUidRecord] = std::to_string(*item.uid);
  if (item.gid) pax[kGidRecord] = std::to_string(*item.gid);
  return pax;
}

// Sends one file. Its digest is checked on another thread, behind the sending (the caller
// asks `digests` before it ends the stream), unless it is a blob and `hash_blobs` is off.
Status WriteFileEntry(const std::string& dir, const std::string& stream_path, const Planned& file, bool hash_blobs,
                      TarWriter* tar, DigestCheck* digests, Progress* progress) {
  std::map<std::string, std::string> pax = OwnerRecords(file);
  pax[kDigestRecord] = file.sha256;
  const Planned::Extra& extra = file.extras();
  if (extra.append_from > 0) {
    pax[kAppendSizeRecord] = std::to_string(extra.append_from);
    pax[kAppendDigestRecord] = extra.append_to_sha256;
  }
  CAPSULE_RETURN_IF_ERROR(tar->BeginFile(stream_path, file.size, file.mode, pax));
  if (extra.has_inline) {
    CAPSULE_RETURN_IF_ERROR(tar->WriteFileData(extra.inline_data));
    if (progress != nullptr) progress->Add(extra.inline_data.size(), 1);
    return tar->EndFile();
  }
  const std::string source = extra.source.empty() ? JoinPath(dir, BlobPath(file.sha256)) : extra.source;
  const bool hash = hash_blobs || !extra.source.empty();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(source, O_RDONLY));
  uint64_t done = 0;
  while (done < file.size) {
    DigestCheck::Buffer* buffer = digests->Take();
    size_t want = static_cast<size_t>(std::min<uint64_t>(buffer->size(), file.size - done));
    Result<size_t> n = ReadAt(fd.get(), buffer->data(), want, static_cast<off_t>(extra.append_from + done), source);
    if (!n.ok() || *n == 0) {
      digests->Give(buffer);
      if (!n.ok()) return n.status();
      return Status::Corruption(source, "shrank while being sent");
    }
    Status sent = tar->WriteFileData(std::string_view(buffer->data(), *n));
    if (hash) {
      digests->Hash(buffer, *n);
    } else {
      digests->Give(buffer);
    }
    CAPSULE_RETURN_IF_ERROR(sent);
    done += *n;
    if (progress != nullptr) progress->Add(*n, 0);
  }
  // What is sent must be what the digest says, even if the file changed under us.
  if (hash) digests->EndFile(source, file.sha256);
  if (progress != nullptr) progress->Add(0, 1);
  return tar->EndFile();
}

}  // namespace

Status CheckSpecHoldsNoSecret(const std::string& dir) {
  const std::string path = JoinPath(dir, kEnvironmentSpecPath);
  if (!PathExists(path)) return Status::Ok();
  CAPSULE_ASSIGN_OR_RETURN(std::string spec, ReadFileBounded(path, kMaxSpecBytes, "an environment spec"));
  Status checked = CheckEnvironmentSpec(spec);
  if (checked.ok()) return checked;
  return Status::Make(checked.code(), "", checked.message() + "; a secret never leaves in a stream: nothing was sent");
}

Status PackCapsule(const std::string& dir, const PackOptions& options, ByteSink* sink, PackStats* stats) {
  // A capsule at rest is trusted before it is sent (capsule/format/trust.h), and no mount
  // starts until it is; a mounted one is vouched for by its mount, which checked it at its
  // open and re-seals what it writes at each checkpoint.
  Result<UniqueFd> at_rest = LockForMount(dir);
  if (at_rest.ok()) {
    CAPSULE_RETURN_IF_ERROR(CheckTrusted(dir));
  } else if (at_rest.status().code() != Code::kAlreadyExists) {
    return at_rest.status();
  }
  CAPSULE_ASSIGN_OR_RETURN(Manifest capsule_manifest, Manifest::LoadHeader(dir));
  // A secret never leaves in a stream: an environment spec that carries a secret value (a
  // variable named like one, a URL with a password) is refused, as capsule verify refuses it.
  if (options.phase != Phase::kFiles) CAPSULE_RETURN_IF_ERROR(CheckSpecHoldsNoSecret(dir));
  StreamManifest manifest;
  manifest.phase = options.phase;
  if (options.move_id) {
    manifest.move = *options.move_id;
  } else if (options.phase == Phase::kSwitch) {
    return Status::InvalidArgument("switch", "needs the move id of its copy (--move)");
  } else {
    CAPSULE_ASSIGN_OR_RETURN(manifest.move, NewMoveId());
  }
  manifest.version = kVersion;
  manifest.agent = capsule_manifest.agent;
  manifest.epoch = options.epoch ? *options.epoch : capsule_manifest.holder_epoch;
  // Schedules travel only while paused (capsule schedule pause), in full.
  if (options.phase == Phase::kSwitch) CAPSULE_RETURN_IF_ERROR(CheckSchedulesMayTravel(dir));
  std::optional<HeldJournal> held_journal = options.held_journal;
  if (held_journal) {
    auto recorded = capsule_manifest.files.find(kJournalPath);
    if (recorded != capsule_manifest.files.end()) held_journal->recorded = recorded->second;
  }
  CAPSULE_ASSIGN_OR_RETURN(auto plan, PlanStream(dir, options.phase, held_journal));
  if (options.phase == Phase::kSwitch) {
    // Both in path order: one pass over each.
    auto planned = plan.begin();
    for (const auto& [path, sha] : options.have) {
      bool tracked = path.rfind("files/", 0) == 0 || path.rfind("memory/", 0) == 0;
      if (!tracked) continue;
      while (planned != plan.end() && planned->first < path) ++planned;
      if (planned == plan.end() || planned->first != path) manifest.removed.push_back(path);
    }
  }
  // FIFOs and devices travel in the manifest, never as tar entries.
  for (const auto& [path, item] : plan) {
    if (item.kind != Planned::Kind::kSpecial) continue;
    const TarEntry& node = item.extras().special;
    manifest.special[path] = StreamSpecial{node.type, item.mode & 0777, node.dev_major, node.dev_minor, item.uid, item.gid};
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string manifest_text, manifest.ToCanonicalText());
  // Fail on a bad move id now, not at the receiver.
  CAPSULE_RETURN_IF_ERROR(StreamManifest::Parse(manifest_text).status().WithContext("move id"));

  PackStats local;
  local.move_id = manifest.move;
  if (auto journal = plan.find(kStreamJournal); journal != plan.end() && journal->second.extras().append_from == 0) {
    local.journal = HeldJournal{journal->second.size, journal->second.sha256, journal->second.extras().journal_seen,
                                std::nullopt};
  }
  local.removed = manifest.removed.size();
  auto skipped = [&options](const std::string& path, const Planned& item) {
    auto held = options.have.find(path);
    // Never the events appended to a journal the receiver holds: their digest is not the
    // whole file's, which is what the have names.
    return held != options.have.end() && held->second == item.sha256 && item.link == 0 && !item.whole &&
           item.extras().append_from == 0;
  };
  if (options.progress != nullptr) {
    uint64_t bytes = 0, files = 0;
    for (const auto& [path, item] : plan) {
      if (item.kind == Planned::Kind::kFile && !skipped(path, item)) bytes += item.size, ++files;
    }
    options.progress->Begin(PhaseName(options.phase), bytes, files);
  }
  TarWriter tar(sink);
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kStreamManifestName, manifest_text, 0644, {{kDigestRecord, Sha256Hex(manifest_text)}}));
  DigestCheck digests;
  for (const auto& [path, item] : plan) {
    switch (item.kind) {
      case Planned::Kind::kFolder:
        CAPSULE_RETURN_IF_ERROR(tar.AddDirectory(path, item.mode, OwnerRecords(item)));
        break;
      case Planned::Kind::kLink:
        CAPSULE_RETURN_IF_ERROR(tar.AddSymlink(path, item.extras().link_target, OwnerRecords(item)));
        break;
      case Planned::Kind::kHardLink:
        CAPSULE_RETURN_IF_ERROR(tar.AddHardLink(path, item.extras().link_target));
        break;
      case Planned::Kind::kSpecial:
        break;  // in the manifest
      case Planned::Kind::kFile: {
        if (skipped(path, item)) {
          ++local.files_skipped;
          break;
        }
        CAPSULE_RETURN_IF_ERROR(WriteFileEntry(dir, path, item, options.hash_blobs, &tar, &digests, options.progress));
        ++local.files_sent;
        local.file_bytes_sent += item.size;
        break;
      }
    }
  }
  // The end goes only after every file sent was found to be what its digest says: a stream
  // without it is refused whole.
  if (std::optional<std::string> changed = digests.Finish()) {
    return Status::Corruption(*changed, "does not hash to the digest it is sent under (altered on disk, or changed "
                                        "while being sent); nothing was sent whole");
  }
  CAPSULE_RETURN_IF_ERROR(tar.AddFile(kStreamEndName, "", 0644, {{kDigestRecord, Sha256Hex("")}}));
  CAPSULE_RETURN_IF_ERROR(tar.Finish());
  if (stats != nullptr) *stats = local;
  return Status::Ok();
}

}  // namespace capsule::move
