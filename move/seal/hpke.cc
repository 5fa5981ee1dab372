#include "move/seal/hpke.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "capsule/base/big_endian.h"
#include "move/seal/hkdf.h"

namespace capsule::hpke {

namespace {

constexpr std::string_view kVersionLabel = "HPKE-v1";

// suite_id of the KEM (section 4.1) and of the whole suite (section 5.1).
std::string KemSuiteId() { return "KEM" + BigEndian(kKemX25519HkdfSha256, 2); }
std::string HpkeSuiteId(AeadId aead) {
  return "HPKE" + BigEndian(kKemX25519HkdfSha256, 2) + BigEndian(kKdfHkdfSha256, 2) +
         BigEndian(static_cast<uint16_t>(aead), 2);
}

// LabeledExtract and LabeledExpand of section 4.
Result<std::string> LabeledExtract(const std::string& suite_id, std::string_view salt, std::string_view label,
                                   std::string_view ikm) {
  std::string labeled_ikm = std::string(kVersionLabel) + suite_id + std::string(label) + std::string(ikm);
  Result<std::string> prk = hkdf::ExtractSha256(salt, labeled_ikm);
  OPENSSL_cleanse(labeled_ikm.data(), labeled_ikm.size());
  return prk;
}

Result<std::string> LabeledExpand(const std::string& suite_id, std::string_view prk, std::string_view label,
                                  std::string_view info, size_t length) {
  if (length > 0xFFFF) return Status::InvalidArgument("hpke: expand", "length over 65535");
  std::string labeled_info =
      BigEndian(length, 2) + std::string(kVersionLabel) + suite_id + std::string(label) + std::string(info);
  return hkdf::ExpandSha256(prk, labeled_info, length);
}

const unsigned char* Bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }

Result<std::string> RawPublicKey(EVP_PKEY* key) {
  std::string out(kPublicKeySize, '\0');
  size_t length = out.size();
  if (EVP_PKEY_get_raw_public_key(key, reinterpret_cast<unsigned char*>(out.data()), &length) != 1 ||
      length != kPublicKeySize) {
    return OpenSslError("hpke: public key");
  }
  return out;
}

Result<EvpPkeyPtr> DeserializePublicKey(std::string_view raw) {
  if (raw.size() != kPublicKeySize) return Status::InvalidArgument("hpke: public key", "not 32 bytes");
  EvpPkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, Bytes(raw), raw.size()));
  if (!key) return OpenSslError("hpke: public key");
  return key;
}

// DH(sk, pk) of X25519; refuses the all-zero output (section 7.1.4).
Result<std::string> DiffieHellman(EVP_PKEY* private_key, EVP_PKEY* peer) {
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new(private_key, nullptr));
  std::string out(32, '\0');
  size_t length = out.size();
  if (!ctx || EVP_PKEY_derive_init(ctx.get()) != 1 || EVP_PKEY_derive_set_peer(ctx.get(), peer) != 1 ||
      EVP_PKEY_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), &length) != 1 ||
      length != out.size()) {
    return OpenSslError("hpke: X25519");
  }
  if (out == std::string(32, '\0')) return Status::InvalidArgument("hpke: X25519", "all-zero shared secret");
  return out;
}

// ExtractAndExpand of section 4.1.
Result<std::string> ExtractAndExpand(std::string_view dh, std::string_view kem_context) {
  CAPSULE_ASSIGN_OR_RETURN(std::string eae_prk, LabeledExtract(KemSuiteId(), "", "eae_prk", dh));
  return LabeledExpand(KemSuiteId(), eae_prk, "shared_secret", kem_context, 32);
}

void Wipe(std::string& secret) { OPENSSL_cleanse(secret.data(), secret.size()); }

}  // namespace

Result<KeyPair> GenerateKeyPair() {
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return OpenSslError("hpke: generating a key pair", Code::kIOError);
  }
  KeyPair pair{EvpPkeyPtr(raw), {}};
  CAPSULE_ASSIGN_OR_RETURN(pair.public_key, RawPublicKey(pair.private_key.get()));
  return pair;
}

Result<KeyPair> DeriveKeyPair(std::string_view ikm) {
  CAPSULE_ASSIGN_OR_RETURN(std::string dkp_prk, LabeledExtract(KemSuiteId(), "", "dkp_prk", ikm));
  CAPSULE_ASSIGN_OR_RETURN(std::string sk, LabeledExpand(KemSuiteId(), dkp_prk, "sk", "", kPrivateKeySize));
  Wipe(dkp_prk);
  Result<EvpPkeyPtr> key = DeserializePrivateKey(sk);
  Wipe(sk);
  if (!key.ok()) return key.status();
  KeyPair pair{std::move(key).value(), {}};
  CAPSULE_ASSIGN_OR_RETURN(pair.public_key, RawPublicKey(pair.private_key.get()));
  return pair;
}

Result<std::string> SerializePrivateKey(EVP_PKEY* private_key) {
  std::string out(kPrivateKeySize, '\0');
  size_t length = out.size();
  if (EVP_PKEY_get_raw_private_key(private_key, reinterpret_cast<unsigned char*>(out.data()), &length) != 1 ||
      length != kPrivateKeySize) {
    return OpenSslError("hpke: private key");
  }
  return out;
}

Result<EvpPkeyPtr> DeserializePrivateKey(std::string_view raw) {
  if (raw.size() != kPrivateKeySize) return Status::InvalidArgument("hpke: private key", "not 32 bytes");
  EvpPkeyPtr key(EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, Bytes(raw), raw.size()));
  if (!key) return OpenSslError("hpke: private key");
  return key;
}

Result<Encapsulation> Encap(std::string_view recipient_public_key, const KeyPair* ephemeral) {
  CAPSULE_ASSIGN_OR_RETURN(EvpPkeyPtr pk_r, DeserializePublicKey(recipient_public_key));
  KeyPair fresh;
  if (ephemeral == nullptr) {
    CAPSULE_ASSIGN_OR_RETURN(fresh, GenerateKeyPair());
    ephemeral = &fresh;
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string dh, DiffieHellman(ephemeral->private_key.get(), pk_r.get()));
  Encapsulation out;
  out.enc = ephemeral->public_key;
  Result<std::string> shared = ExtractAndExpand(dh, out.enc + std::string(recipient_public_key));
  Wipe(dh);
  if (!shared.ok()) return shared.status();
  out.shared_secret = std::move(shared).value();
  return out;
}

Result<std::string> Decap(std::string_view enc, EVP_PKEY* recipient_private_key) {
  CAPSULE_ASSIGN_OR_RETURN(EvpPkeyPtr pk_e, DeserializePublicKey(enc));
  CAPSULE_ASSIGN_OR_RETURN(std::string dh, DiffieHellman(recipient_private_key, pk_e.get()));
  CAPSULE_ASSIGN_OR_RETURN(std::string pk_r, RawPublicKey(recipient_private_key));
  Result<std::string> shared = ExtractAndExpand(dh, std::string(enc) + pk_r);
  Wipe(dh);
  return shared;
}

// ---- Context ----

Context::Context(Role role, AeadId aead, std::string key, std::string base_nonce, std::string exporter_secret)
    : role_(role),
      aead_id_(aead),
      key_(std::move(key)),
      base_nonce_(std::move(base_nonce)),
      exporter_secret_(std::move(exporter_secret)) {}

Context::~Context() {
  Wipe(key_);
  Wipe(base_nonce_);
  Wipe(exporter_secret_);
}

Result<Context> Context::KeySchedule(Role role, Mode mode, AeadId aead, std::string_view shared_secret,
                                     std::string_view info, std::string_view psk, std::string_view psk_id) {
  // VerifyPSKInputs.
  bool got_psk = !psk.empty();
  if (got_psk != !psk_id.empty()) return Status::InvalidArgument("hpke", "psk and psk_id go together");
  if (got_psk != (mode == Mode::kPsk)) {
    return Status::InvalidArgument("hpke", mode == Mode::kPsk ? "psk mode needs a psk" : "a psk outside psk mode");
  }
  if (aead != AeadId::kExportOnly && AeadKeySize(aead) == 0) return Status::InvalidArgument("hpke", "unknown AEAD");
  const std::string suite_id = HpkeSuiteId(aead);
  CAPSULE_ASSIGN_OR_RETURN(std::string psk_id_hash, LabeledExtract(suite_id, "", "psk_id_hash", psk_id));
  CAPSULE_ASSIGN_OR_RETURN(std::string info_hash, LabeledExtract(suite_id, "", "info_hash", info));
  std::string context = std::string(1, static_cast<char>(mode)) + psk_id_hash + info_hash;
  CAPSULE_ASSIGN_OR_RETURN(std::string secret, LabeledExtract(suite_id, shared_secret, "secret", psk));
  Result<std::string> key = LabeledExpand(suite_id, secret, "key", context, AeadKeySize(aead));
  Result<std::string> base_nonce = LabeledExpand(suite_id, secret, "base_nonce", context, AeadNonceSize(aead));
  Result<std::string> exporter_secret = LabeledExpand(suite_id, secret, "exp", context, hkdf::kSha256Size);
  Wipe(secret);
  if (!key.ok()) return key.status();
  if (!base_nonce.ok()) return base_nonce.status();
  if (!exporter_secret.ok()) return exporter_secret.status();
  Context out(role, aead, std::move(key).value(), std::move(base_nonce).value(),
              std::move(exporter_secret).value());
  if (aead != AeadId::kExportOnly) {
    CAPSULE_ASSIGN_OR_RETURN(AeadCipher cipher, AeadCipher::Create(aead, out.key_));
    out.aead_ = std::make_unique<AeadCipher>(std::move(cipher));
  }
  return out;
}

Status Context::CheckCanUse(Role role, const char* what) const {
  if (role_ != role) {
    return Status::FailedPrecondition(what, role == Role::kSender ? "a recipient's context only opens"
                                                                  : "a sender's context only seals");
  }
  if (!aead_) return Status::FailedPrecondition(what, "an export-only context neither seals nor opens");
  // IncrementSeq refuses once seq reaches its last value; with a 12-byte nonce the 64-bit
  // counter is the tighter limit.
  if (seq_ == UINT64_MAX) return Status::FailedPrecondition(what, "message limit reached (sequence number)");
  return Status::Ok();
}

std::string Context::ComputeNonce() const {
  std::string nonce = base_nonce_;
  std::string seq = BigEndian(seq_, 8);
  for (size_t i = 0; i < seq.size(); ++i) nonce[nonce.size() - seq.size() + i] ^= seq[i];
  return nonce;
}

Result<std::string> Context::Seal(std::string_view aad, std::string_view plaintext) {
  CAPSULE_RETURN_IF_ERROR(CheckCanUse(Role::kSender, "hpke: seal"));
  CAPSULE_ASSIGN_OR_RETURN(std::string ciphertext, aead_->Seal(ComputeNonce(), aad, plaintext));
  ++seq_;
  return ciphertext;
}

Result<std::string> Context::Open(std::string_view aad, std::string_view ciphertext) {
  CAPSULE_RETURN_IF_ERROR(CheckCanUse(Role::kRecipient, "hpke: open"));
  Result<std::string> plaintext = aead_->Open(ComputeNonce(), aad, ciphertext);
  if (!plaintext.ok()) return plaintext.status().WithContext("hpke");
  ++seq_;
  return plaintext;
}

Result<std::string> Context::Export(std::string_view exporter_context, size_t length) const {
  if (length > 255 * hkdf::kSha256Size) return Status::InvalidArgument("hpke: export", "length over 255 * 32");
  return LabeledExpand(HpkeSuiteId(aead_id_), exporter_secret_, "sec", exporter_context, length);
}

// ---- Setup ----

namespace {

Result<SenderSetup> SetupSender(Mode mode, std::string_view pk_r, std::string_view info, std::string_view psk,
                                std::string_view psk_id, AeadId aead, const KeyPair* ephemeral) {
  CAPSULE_ASSIGN_OR_RETURN(Encapsulation kem, Encap(pk_r, ephemeral));
  Result<Context> context =
      Context::KeySchedule(Context::Role::kSender, mode, aead, kem.shared_secret, info, psk, psk_id);
  Wipe(kem.shared_secret);
  if (!context.ok()) return context.status();
  return SenderSetup{std::move(kem.enc), std::move(context).value()};
}

Result<Context> SetupRecipient(Mode mode, std::string_view enc, EVP_PKEY* sk_r, std::string_view info,
                               std::string_view psk, std::string_view psk_id, AeadId aead) {
  CAPSULE_ASSIGN_OR_RETURN(std::string shared_secret, Decap(enc, sk_r));
  Result<Context> context =
      Context::KeySchedule(Context::Role::kRecipient, mode, aead, shared_secret, info, psk, psk_id);
  Wipe(shared_secret);
  return context;
}

}  // namespace

Result<SenderSetup> SetupBaseSender(std::string_view recipient_public_key, std::string_view info, AeadId aead) {
  return SetupSender(Mode::kBase, recipient_public_key, info, "", "", aead, nullptr);
}

Result<Context> SetupBaseRecipient(std::string_view enc, EVP_PKEY* recipient_private_key, std::string_view info,
                                   AeadId aead) {
  return SetupRecipient(Mode::kBase, enc, recipient_private_key, info, "", "", aead);
}

Result<SenderSetup> SetupPskSender(std::string_view recipient_public_key, std::string_view info,
                                   std::string_view psk, std::string_view psk_id, AeadId aead) {
  return SetupSender(Mode::kPsk, recipient_public_key, info, psk, psk_id, aead, nullptr);
}

Result<Context> SetupPskRecipient(std::string_view enc, EVP_PKEY* recipient_private_key, std::string_view info,
                                  std::string_view psk, std::string_view psk_id, AeadId aead) {
  return SetupRecipient(Mode::kPsk, enc, recipient_private_key, info, psk, psk_id, aead);
}

Result<SenderSetup> SetupSenderWithEphemeral(Mode mode, std::string_view recipient_public_key, std::string_view info,
                                             std::string_view psk, std::string_view psk_id, AeadId aead,
                                             const KeyPair& ephemeral) {
  return SetupSender(mode, recipient_public_key, info, psk, psk_id, aead, &ephemeral);
}

Result<SealedMessage> SealBase(std::string_view recipient_public_key, std::string_view info, std::string_view aad,
                               std::string_view plaintext, AeadId aead) {
  CAPSULE_ASSIGN_OR_RETURN(SenderSetup setup, SetupBaseSender(recipient_public_key, info, aead));
  CAPSULE_ASSIGN_OR_RETURN(std::string ciphertext, setup.context.Seal(aad, plaintext));
  return SealedMessage{std::move(setup.enc), std::move(ciphertext)};
}

Result<std::string> OpenBase(std::string_view enc, EVP_PKEY* recipient_private_key, std::string_view info,
                             std::string_view aad, std::string_view ciphertext, AeadId aead) {
  CAPSULE_ASSIGN_OR_RETURN(Context context, SetupBaseRecipient(enc, recipient_private_key, info, aead));
  return context.Open(aad, ciphertext);
}

}  // namespace capsule::hpke
