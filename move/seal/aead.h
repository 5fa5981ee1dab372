// The AEADs HPKE names (RFC 9180 section 7.3), on OpenSSL's EVP cipher interface: AES-128-GCM,
// AES-256-GCM and ChaCha20-Poly1305, each with a 12-byte nonce and a 16-byte tag.
//
// An AeadCipher holds one key and seals or opens any number of messages under caller-chosen
// nonces; choosing each nonce once per key is the caller's duty (hpke::Context and the sealed
// envelope derive them from counters).
//
// Thread-safety: thread-compatible; one AeadCipher per thread, or external locking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "capsule/base/openssl_handles.h"
#include "capsule/base/status.h"

namespace capsule {

// RFC 9180 AEAD identifiers. kExportOnly has no cipher: an HPKE context with it only exports.
enum class AeadId : uint16_t {
  kAes128Gcm = 0x0001,
  kAes256Gcm = 0x0002,
  kChaCha20Poly1305 = 0x0003,
  kExportOnly = 0xFFFF,
};

inline constexpr size_t kAeadNonceSize = 12;
inline constexpr size_t kAeadTagSize = 16;

// Nk: the key size of `id` in bytes (0 for kExportOnly).
size_t AeadKeySize(AeadId id);
// Nn: the nonce size of `id` in bytes (0 for kExportOnly).
size_t AeadNonceSize(AeadId id);

class AeadCipher {
 public:
  // InvalidArgument for kExportOnly, an unknown id or a key of the wrong size.
  static Result<AeadCipher> Create(AeadId id, std::string_view key);

  // Writes ciphertext || tag, plaintext.size() + 16 bytes, to `out`.
  // REQUIRES: nonce.size() == 12; `out` does not overlap the inputs.
  Status Seal(std::string_view nonce, std::string_view aad, std::string_view plaintext, char* out);

  // Checks the tag of `sealed` (ciphertext || tag) and writes sealed.size() - 16 bytes of
  // plaintext to `out`; nothing in `out` may be used unless this returns ok. Corruption when
  // the tag does not verify or `sealed` is shorter than a tag.
  // REQUIRES: nonce.size() == 12; `out` does not overlap the inputs.
  Status Open(std::string_view nonce, std::string_view aad, std::string_view sealed, char* out);

  // The same, into strings.
  Result<std::string> Seal(std::string_view nonce, std::string_view aad, std::string_view plaintext);
  Result<std::string> Open(std::string_view nonce, std::string_view aad, std::string_view sealed);

 private:
  AeadCipher(EvpCipherCtxPtr encrypt, EvpCipherCtxPtr decrypt)
      : encrypt_(std::move(encrypt)), decrypt_(std::move(decrypt)) {}

  // Each context holds the key from Create; Seal and Open only set the nonce.
  EvpCipherCtxPtr encrypt_;
  EvpCipherCtxPtr decrypt_;
};

}  // namespace capsule
