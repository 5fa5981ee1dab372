// Keys: Ed25519 for signing exports, X25519 for sealing a move to a sidecar.
//
// A private key file is PEM (PKCS#8, as `openssl pkey` reads it), mode 0600. A public key is
// given as 64 hex digits: the raw 32-byte key, as `capsule keygen` prints it.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/openssl_handles.h"
#include "capsule/base/status.h"

namespace capsule {

enum class KeyType { kEd25519, kX25519 };

// A new private key, PEM-encoded, and its public key in hex.
struct GeneratedKey {
  std::string private_pem, public_hex;
};
Result<GeneratedKey> GenerateKey(KeyType type);

// Writes a new private key to `path` (which must not exist) and returns its public key in hex.
Result<std::string> GenerateKeyFile(KeyType type, const std::string& path);

// The largest key file read (a PEM key is a few hundred bytes): anything larger, or not a
// regular file, is refused as it is read.
inline constexpr uint64_t kMaxKeyFileBytes = 64 << 10;

// Reads a private key file; InvalidArgument unless it holds a key of `type`.
Result<EvpPkeyPtr> LoadPrivateKey(const std::string& path, KeyType type);

// The raw public half of a key, in hex.
Result<std::string> PublicKeyHex(EVP_PKEY* key);

// Reads a public key (64 hex digits, surrounding white space ignored) from a file.
Result<std::string> LoadPublicKeyHexFile(const std::string& path);

Result<std::string> Ed25519Sign(EVP_PKEY* private_key, std::string_view message);
// Ok when `signature` is `public_key_hex`'s signature of `message`; InvalidArgument otherwise.
Status Ed25519Verify(const std::string& public_key_hex, std::string_view message,
                     std::string_view signature);

}  // namespace capsule
