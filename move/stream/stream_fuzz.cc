// libFuzzer target: arbitrary bytes into ReadStream, written into a fresh folder that is removed
// afterwards. The reader must refuse, never crash, hang, read out of bounds or write outside
// its folder; when it accepts, every entry must have a path its phase allows and every file
// must be where it says, with its digest. Built and run by tests/fuzz.sh stream.
//
// With FUZZ_SEED_DIR set, it first packs a small real capsule (copy, files and a
// switch with removed paths) into that folder as seeds, so that mutations start from real
// streams.
#include <stdlib.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/create.h"
#include "move/stream/reader.h"
#include "move/stream/writer.h"

namespace {

std::string TempDir(const char* name) {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base ? base : "/tmp") + "/" + name + "-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) std::abort();
  return pattern;
}

void WriteSeeds(const std::string& dir) {
  std::string root = TempDir("stream-fuzz-seed");
  std::string ws = root + "/ws";
  if (!capsule::MakeDirectories(ws + "/src").ok()) std::abort();
  (void)capsule::WriteFileAtomic(ws + "/README.md", "# seed\n");
  (void)capsule::WriteFileAtomic(ws + "/src/main.py", "print('hi')\n");
  (void)capsule::WriteFileAtomic(ws + "/src/edge.bin", std::string(1000, 'e'));
  (void)::symlink("../README.md", (ws + "/src/link").c_str());
  capsule::CreateOptions options;
  options.agent = {"fuzz-agent", "Fuzz", std::nullopt};
  options.workspace_source = ws;
  if (!capsule::CreateCapsule(root + "/cap", options).ok()) std::abort();
  using capsule::move::Phase;
  for (Phase phase : {Phase::kCopy, Phase::kFiles, Phase::kSwitch}) {
    capsule::move::PackOptions pack;
    pack.phase = phase;
    pack.move_id = std::string(32, 'f');
    if (phase == Phase::kSwitch) pack.have = {{"files/gone.txt", std::string(64, '0')}};
    capsule::StringSink sink;
    if (!capsule::move::PackCapsule(root + "/cap", pack, &sink, nullptr).ok()) std::abort();
    std::ofstream(dir + "/seed-" + capsule::move::PhaseName(phase), std::ios::binary) << sink.data();
  }
  (void)capsule::RemoveTree(root);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string parent = TempDir("stream-fuzz");
  std::string into = parent + "/into";
  if (!capsule::MakeDirectories(into).ok()) std::abort();
  // As in UnpackStream: the folder is a staging folder, synced once (here never) at the end.
  capsule::StagingSync no_fsync(into);
  capsule::StringSource source(std::string(reinterpret_cast<const char*>(data), size));
  auto stream = capsule::move::ReadStream(&source, into);
  if (stream.ok()) {
    for (const auto& [path, entry] : stream->entries) {
      if (!capsule::move::CheckStreamPath(path, stream->manifest.phase).ok()) std::abort();
      if (entry.kind == capsule::move::ReceivedEntry::Kind::kFile &&
          capsule::Sha256File(capsule::JoinPath(into, path)).value() != entry.sha256) {
        std::abort();
      }
    }
  }
  // Nothing may appear beside the folder the reader was given.
  auto beside = capsule::ListTree(parent);
  for (const auto& e : beside.value()) {
    if (e.path != "into" && e.path.rfind("into/", 0) != 0) std::abort();
  }
  if (!capsule::RemoveTree(into).ok()) std::abort();
  return 0;
}
