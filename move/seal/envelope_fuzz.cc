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

// What a reader gives of `input` read by Read, or by NextPiece: the plaintext and the verdict.
struct Opened {
  std::string plaintext;
  std::string error;  // empty: the end was reached
};

Opened OpenAll(const std::string& input, bool by_pieces) {
  capsule::StringSource source(input);
  auto reader = capsule::EnvelopeReader::Open(&source, FixedKey().private_key.get());
  if (!reader.ok()) return {"", reader.status().message()};
  Opened opened;
  char buffer[4096];
  for (;;) {
    capsule::Status failed;
    if (by_pieces) {
      auto piece = (*reader)->NextPiece();
      if (piece.ok() && piece->empty()) return opened;
      if (piece.ok()) opened.plaintext.append(*piece);
      failed = piece.status();
    } else {
      auto n = (*reader)->Read(buffer, sizeof buffer);
      if (n.ok() && *n == 0) return opened;
      if (n.ok()) opened.plaintext.append(buffer, *n);
      failed = n.status();
    }
    if (!failed.ok()) {
      // Errors stick, by either way of reading.
      if ((*reader)->Read(buffer, sizeof buffer).ok() || (*reader)->NextPiece().ok()) std::abort();
      opened.error = failed.message();
      return opened;
    }
  }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string input(reinterpret_cast<const char*>(data), size);
  Opened read = OpenAll(input, false);
  Opened pieces = OpenAll(input, true);
  // Both ways give the same bytes and the same verdict.
  if (read.plaintext != pieces.plaintext || read.error != pieces.error) std::abort();
  return 0;
}
