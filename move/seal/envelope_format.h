// The sealed envelope's layout (LNKSEAL1), as the constants the reader and writer share. The
// format in words is man/capsule-envelope.5 and the "sealed envelope" section of move.md:
//
//   "LNKSEAL1"                         8 bytes
//   header_len                         u32 big-endian, at most 4096 (80 today)
//   header = enc || sealed stream key  HPKE base mode, single shot, info = kEnvelopeInfo, aad ""
//   records, each:
//     plaintext_len                    u32 big-endian, at most 65536
//     ciphertext || tag                plaintext_len + 16 bytes, AES-256-GCM under the stream key
//   final record: plaintext_len 0, then its 16-byte tag; nothing may follow it
//
// Record number n (from 0) uses nonce = 00 00 00 00 || u64be(n) and additional data
// u64be(n) || u32be(plaintext_len).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "move/seal/aead.h"
#include "move/seal/hpke.h"

namespace capsule::envelope {

inline constexpr std::string_view kMagic = "LNKSEAL1";
inline constexpr size_t kMaxHeaderSize = 4096;
inline constexpr size_t kMaxRecordSize = 65536;  // plaintext bytes in one record
inline constexpr size_t kStreamKeySize = 32;
inline constexpr size_t kLengthSize = 4;
inline constexpr size_t kTagSize = kAeadTagSize;
inline constexpr AeadId kHeaderAead = AeadId::kAes256Gcm;
inline constexpr AeadId kRecordAead = AeadId::kAes256Gcm;
// The HPKE info, byte for byte.
inline constexpr std::string_view kEnvelopeInfo = R"({"owner":"move","kind":"stream","version":1})";
static_assert(kEnvelopeInfo.size() == 44);
// What a writer puts in header_len today.
inline constexpr size_t kHeaderSize = hpke::kEncSize + kStreamKeySize + kTagSize;
static_assert(kHeaderSize == 80);

// The one message every refusal of a received envelope starts with.
inline constexpr std::string_view kCorrupted = "sealed envelope: corrupted or tampered";

}  // namespace capsule::envelope
