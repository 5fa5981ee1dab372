// libFuzzer target: arbitrary bytes into EnvelopeReader with a fixed recipient key. The reader
// must refuse, never crash, hang or read out of bounds, and never end cleanly on bytes that
// are not an envelope sealed to that key. Built and run by tests/fuzz.sh envelope.
//
// With FUZZ_SEED_DIR set, it first writes valid envelopes (0, 1, 300 and 70000
// bytes, sealed to the fixed key) into that folder as seeds, so that mutations start from real
// envelopes: a cut, a changed length, bytes after the end.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "capsule/base/byte_stream.h"
#include "move/seal/envelope.h"
#include "move/seal/hpke.h"

namespace {

const capsule::hpke::KeyPair& FixedKey() {
  static const capsule::hpke::KeyPair* key = [] {
    auto pair = capsule::hpke::DeriveKeyPair("capsulefs envelope fuzz key");
    if (!pair.ok()) std::abort();
    return new capsule::hpke::KeyPair(std::move(pair).value());
  }();
  return *key;
}

void WriteSeeds(const std::string& dir) {
  for (size_t size : {0, 1, 300, 70000}) {
    capsule::StringSink sink;
    auto writer = capsule::EnvelopeWriter::Create(&sink, FixedKey().public_key);
    if (!writer.ok() || !(*writer)->Write(std::string(size, 'a')).ok() || !(*writer)->Close().ok()) std::abort();
    std::ofstream(dir + "/seed-" + std::to_string(size), std::ios::binary) << sink.data();
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* dir = std::getenv("FUZZ_SEED_DIR")) WriteSeeds(dir);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  capsule::StringSource source(std::string(reinterpret_cast<const char*>(data), size));
  auto reader = capsule::EnvelopeReader::Open(&source, FixedKey().private_key.get());
  if (!reader.ok()) return 0;
  char buffer[4096];
  for (;;) {
    auto n = (*reader)->Read(buffer, sizeof buffer);
    if (!n.ok()) {
      if ((*reader)->Read(buffer, sizeof buffer).ok()) std::abort();  // errors stick
      return 0;
    }
    if (*n == 0) return 0;
  }
}
