// HPKE (RFC 9180) on OpenSSL 3.0 primitives, for one KEM and one KDF: DHKEM(X25519,
// HKDF-SHA256) (0x0020) and HKDF-SHA256 (0x0001), with the AEADs of aead.h (AES-128-GCM,
// AES-256-GCM, ChaCha20-Poly1305, or export-only). Modes: base (0) and psk (1).
//
// A sender calls SetupBaseSender with the recipient's public key and gets `enc` (to send) and
// a Context that seals; the recipient calls SetupBaseRecipient with `enc` and its private key
// and gets a Context that opens. Both ends' Contexts export the same secrets. SealBase and
// OpenBase are the single-shot forms (one message per setup).
//
// Keys: a private key is an X25519 EVP_PKEY (as keys.h loads it); public keys and `enc` are
// the 32 raw bytes RFC 7748 defines.
//
// Thread-safety: free functions are safe from any thread; a Context is thread-compatible.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "capsule/base/openssl_handles.h"
#include "capsule/base/status.h"
#include "move/seal/aead.h"

namespace capsule::hpke {

inline constexpr uint16_t kKemX25519HkdfSha256 = 0x0020;
inline constexpr uint16_t kKdfHkdfSha256 = 0x0001;
inline constexpr size_t kEncSize = 32;        // Nenc: an X25519 public key
inline constexpr size_t kPublicKeySize = 32;  // Npk
inline constexpr size_t kPrivateKeySize = 32; // Nsk

enum class Mode : uint8_t { kBase = 0x00, kPsk = 0x01 };

// An X25519 key pair.
struct KeyPair {
  EvpPkeyPtr private_key;
  std::string public_key;  // 32 bytes
};

// A fresh random key pair.
Result<KeyPair> GenerateKeyPair();
// DeriveKeyPair(ikm) of RFC 9180 section 7.1.3: the same ikm always gives the same pair.
Result<KeyPair> DeriveKeyPair(std::string_view ikm);
// The 32 raw bytes of an X25519 private key, and back.
Result<std::string> SerializePrivateKey(EVP_PKEY* private_key);
Result<EvpPkeyPtr> DeserializePrivateKey(std::string_view raw);

// The KEM's two halves (section 4.1). Encap uses `ephemeral` when given (known-answer tests
// only: an ephemeral key must never be used twice), otherwise a fresh key pair.
struct Encapsulation {
  std::string shared_secret;  // 32 bytes
  std::string enc;            // 32 bytes
};
Result<Encapsulation> Encap(std::string_view recipient_public_key, const KeyPair* ephemeral = nullptr);
Result<std::string> Decap(std::string_view enc, EVP_PKEY* recipient_private_key);

// The state both ends hold after setup (section 5.2): the AEAD key, the base nonce, the
// sequence number and the exporter secret. A sender's context only seals, a recipient's only
// opens; each message uses the nonce base_nonce XOR seq, and seq counts up from 0.
class Context {
 public:
  enum class Role { kSender, kRecipient };

  // KeySchedule of section 5.1. Base mode takes an empty psk and psk_id, psk mode two
  // non-empty ones; anything else is InvalidArgument.
  static Result<Context> KeySchedule(Role role, Mode mode, AeadId aead, std::string_view shared_secret,
                                     std::string_view info, std::string_view psk, std::string_view psk_id);

  Context(Context&&) = default;
  Context& operator=(Context&&) = default;
  ~Context();  // wipes the secrets

  // Ciphertext || tag of `plaintext`, then seq + 1. FailedPrecondition on a recipient's
  // context, an export-only context, or when seq cannot be incremented (then nothing more can
  // be sealed: the message limit of section 5.2).
  Result<std::string> Seal(std::string_view aad, std::string_view plaintext);
  // The plaintext of `ciphertext` (ciphertext || tag), then seq + 1. Corruption when it does
  // not verify (seq unchanged); FailedPrecondition as for Seal, on a sender's context.
  Result<std::string> Open(std::string_view aad, std::string_view ciphertext);
  // Export (section 5.3): `length` bytes (at most 255 * 32) bound to `exporter_context`.
  Result<std::string> Export(std::string_view exporter_context, size_t length) const;

  // The key schedule's outputs, for known-answer tests.
  const std::string& key() const { return key_; }
  const std::string& base_nonce() const { return base_nonce_; }
  const std::string& exporter_secret() const { return exporter_secret_; }
  uint64_t sequence_number() const { return seq_; }
  // Tests only: jump to a sequence number, to check the message limit.
  void SetSequenceNumberForTesting(uint64_t seq) { seq_ = seq; }

 private:
  Context(Role role, AeadId aead, std::string key, std::string base_nonce, std::string exporter_secret);
  std::string ComputeNonce() const;  // base_nonce XOR seq
  Status CheckCanUse(Role role, const char* what) const;

  Role role_;
  AeadId aead_id_;
  std::string key_;
  std::string base_nonce_;
  std::string exporter_secret_;
  uint64_t seq_ = 0;
  std::unique_ptr<AeadCipher> aead_;  // null for kExportOnly
};

struct SenderSetup {
  std::string enc;
  Context context;
};

// Base mode (section 5.1.1).
Result<SenderSetup> SetupBaseSender(std::string_view recipient_public_key, std::string_view info,
                                    AeadId aead = AeadId::kAes256Gcm);
Result<Context> SetupBaseRecipient(std::string_view enc, EVP_PKEY* recipient_private_key,
                                   std::string_view info, AeadId aead = AeadId::kAes256Gcm);
// PSK mode (section 5.1.2).
Result<SenderSetup> SetupPskSender(std::string_view recipient_public_key, std::string_view info,
                                   std::string_view psk, std::string_view psk_id,
                                   AeadId aead = AeadId::kAes256Gcm);
Result<Context> SetupPskRecipient(std::string_view enc, EVP_PKEY* recipient_private_key, std::string_view info,
                                  std::string_view psk, std::string_view psk_id,
                                  AeadId aead = AeadId::kAes256Gcm);
// Either mode with a given ephemeral key pair: for known-answer tests only.
Result<SenderSetup> SetupSenderWithEphemeral(Mode mode, std::string_view recipient_public_key,
                                             std::string_view info, std::string_view psk,
                                             std::string_view psk_id, AeadId aead, const KeyPair& ephemeral);

// Single-shot base mode (section 6.1): one message per encapsulation.
struct SealedMessage {
  std::string enc;
  std::string ciphertext;  // ciphertext || tag
};
Result<SealedMessage> SealBase(std::string_view recipient_public_key, std::string_view info,
                               std::string_view aad, std::string_view plaintext,
                               AeadId aead = AeadId::kAes256Gcm);
Result<std::string> OpenBase(std::string_view enc, EVP_PKEY* recipient_private_key, std::string_view info,
                             std::string_view aad, std::string_view ciphertext,
                             AeadId aead = AeadId::kAes256Gcm);

}  // namespace capsule::hpke
