// libFuzzer target: arbitrary bytes as a manifest and as a snapshot, each read by its fast
// reader of canonical text (Parse) and by the general reader (ParseThroughJson). The fast
// reader must never accept a text the general one refuses, and what it accepts must read to
// the same manifest or snapshot. Built and run by tests/fuzz.sh format; seeded with a
// manifest and a snapshot of every entry kind when FUZZ_SEED_DIR is set.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/workspace.h"

namespace {

void WriteSeeds(const std::string& dir) {
  using capsule::SnapshotEntry;
  capsule::Manifest manifest;
  manifest.agent.id = "a1";
  manifest.agent.name = "Agent";
  manifest.agent.owner = "owner";
  manifest.holder_machine = "m-0000000000000001";
  manifest.holder_epoch = 3;
  manifest.files["artifacts/blobs/" + capsule::Sha256Hex("x")] = {capsule::Sha256Hex("x"), 1};
  manifest.files["manifest-less/file"] = {capsule::Sha256Hex(""), 0};
  std::ofstream(dir + "/seed-manifest", std::ios::binary) << *manifest.ToCanonicalText();
  capsule::Snapshot snapshot;
  SnapshotEntry file;
  file.sha256 = capsule::Sha256Hex("x");
  file.size = 1;
  file.link = 1;
  file.uid = 1000;
  file.gid = 100;
  snapshot.Set("a", file);
  snapshot.Set("b", file);
  SnapshotEntry folder;
  folder.type = SnapshotEntry::Type::kDirectory;
  folder.mode = 0755;
  snapshot.Set("d", folder);
  SnapshotEntry link;
  link.type = SnapshotEntry::Type::kSymlink;
  link.target = "../a";
  snapshot.Set("d/l", link);
  SnapshotEntry device;
  device.type = SnapshotEntry::Type::kCharDevice;
  device.mode = 0600;
  device.rdev = 259;
  snapshot.Set("dev", device);
  SnapshotEntry fifo;
  fifo.type = SnapshotEntry::Type::kFifo;
  fifo.mode = 0600;
  snapshot.Set("p", fifo);
  std::ofstream(dir + "/seed-snapshot", std::ios::binary) << *snapshot.ToCanonicalText();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  capsule::Result<capsule::Manifest> manifest = capsule::Manifest::Parse(text);
  capsule::Result<capsule::Manifest> manifest_general = capsule::Manifest::ParseThroughJson(text);
  if (manifest.ok() != manifest_general.ok()) std::abort();
  if (manifest.ok() && manifest->ToJson() != manifest_general->ToJson()) std::abort();
  // The header reader refuses what Parse refuses and keeps what it keeps but the files, the
  // journal's entry excepted.
  capsule::Result<capsule::Manifest> header = capsule::Manifest::ParseHeader(text);
  if (header.ok() != manifest.ok()) std::abort();
  if (header.ok()) {
    capsule::Manifest without_files = *manifest;
    std::erase_if(without_files.files, [](const auto& entry) { return entry.first != capsule::kJournalPath; });
    if (header->ToJson() != without_files.ToJson()) std::abort();
  }
  capsule::Result<capsule::Snapshot> snapshot = capsule::Snapshot::Parse(text);
  capsule::Result<capsule::Snapshot> snapshot_general = capsule::Snapshot::ParseThroughJson(text);
  if (snapshot.ok() != snapshot_general.ok()) std::abort();
  if (snapshot.ok() && snapshot->entries() != snapshot_general->entries()) std::abort();
  return 0;
}
