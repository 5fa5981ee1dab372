#include "move/seal/aead.h"

#include <openssl/evp.h>

#include <climits>
#include <cstring>

namespace capsule {

namespace {

const EVP_CIPHER* CipherOf(AeadId id) {
  switch (id) {
    case AeadId::kAes128Gcm:
      return EVP_aes_128_gcm();
    case AeadId::kAes256Gcm:
      return EVP_aes_256_gcm();
    case AeadId::kChaCha20Poly1305:
      return EVP_chacha20_poly1305();
    case AeadId::kExportOnly:
      break;
  }
  return nullptr;
}

const unsigned char* Bytes(std::string_view s) { return reinterpret_cast<const unsigned char*>(s.data()); }
unsigned char* Bytes(char* p) { return reinterpret_cast<unsigned char*>(p); }

// EVP lengths are int; a record or HPKE message is far below INT_MAX, but refuse rather than wrap.
bool FitsInt(std::string_view s) { return s.size() <= static_cast<size_t>(INT_MAX); }

Result<EvpCipherCtxPtr> NewContext(const EVP_CIPHER* cipher, std::string_view key, int encrypt) {
  EvpCipherCtxPtr ctx(EVP_CIPHER_CTX_new());
  if (!ctx || EVP_CipherInit_ex(ctx.get(), cipher, nullptr, Bytes(key), nullptr, encrypt) != 1) {
    return OpenSslError("aead: setting the key", Code::kIOError);
  }
  return ctx;
}

}  // namespace

size_t AeadKeySize(AeadId id) {
  switch (id) {
    case AeadId::kAes128Gcm:
      return 16;
    case AeadId::kAes256Gcm:
    case AeadId::kChaCha20Poly1305:
      return 32;
    case AeadId::kExportOnly:
      break;
  }
  return 0;
}

size_t AeadNonceSize(AeadId id) { return CipherOf(id) == nullptr ? 0 : kAeadNonceSize; }

Result<AeadCipher> AeadCipher::Create(AeadId id, std::string_view key) {
  const EVP_CIPHER* cipher = CipherOf(id);
  if (cipher == nullptr) return Status::InvalidArgument("aead", "no cipher for this AEAD id");
  if (key.size() != AeadKeySize(id)) return Status::InvalidArgument("aead", "key of the wrong size");
  CAPSULE_ASSIGN_OR_RETURN(EvpCipherCtxPtr encrypt, NewContext(cipher, key, 1));
  CAPSULE_ASSIGN_OR_RETURN(EvpCipherCtxPtr decrypt, NewContext(cipher, key, 0));
  return AeadCipher(std::move(encrypt), std::move(decrypt));
}

Status AeadCipher::Seal(std::string_view nonce, std::string_view aad, std::string_view plaintext, char* out) {
  if (nonce.size() != kAeadNonceSize || !FitsInt(aad) || !FitsInt(plaintext)) {
    return Status::InvalidArgument("aead: seal", "bad nonce or input size");
  }
  EVP_CIPHER_CTX* ctx = encrypt_.get();
  int n = 0;
  if (EVP_EncryptInit_ex(ctx, nullptr, nullptr, nullptr, Bytes(nonce)) != 1 ||
      (!aad.empty() && EVP_EncryptUpdate(ctx, nullptr, &n, Bytes(aad), static_cast<int>(aad.size())) != 1) ||
      (!plaintext.empty() &&
       EVP_EncryptUpdate(ctx, Bytes(out), &n, Bytes(plaintext), static_cast<int>(plaintext.size())) != 1) ||
      EVP_EncryptFinal_ex(ctx, Bytes(out + plaintext.size()), &n) != 1 ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, kAeadTagSize, out + plaintext.size()) != 1) {
    return OpenSslError("aead: seal", Code::kIOError);
  }
  return Status::Ok();
}

Status AeadCipher::Open(std::string_view nonce, std::string_view aad, std::string_view sealed, char* out) {
  if (nonce.size() != kAeadNonceSize || !FitsInt(aad) || !FitsInt(sealed)) {
    return Status::InvalidArgument("aead: open", "bad nonce or input size");
  }
  if (sealed.size() < kAeadTagSize) return Status::Corruption("aead: open", "shorter than a tag");
  std::string_view ciphertext = sealed.substr(0, sealed.size() - kAeadTagSize);
  unsigned char tag[kAeadTagSize];  // EVP wants a writable tag buffer
  std::memcpy(tag, sealed.data() + ciphertext.size(), kAeadTagSize);
  EVP_CIPHER_CTX* ctx = decrypt_.get();
  int n = 0;
  if (EVP_DecryptInit_ex(ctx, nullptr, nullptr, nullptr, Bytes(nonce)) != 1 ||
      (!aad.empty() && EVP_DecryptUpdate(ctx, nullptr, &n, Bytes(aad), static_cast<int>(aad.size())) != 1) ||
      (!ciphertext.empty() &&
       EVP_DecryptUpdate(ctx, Bytes(out), &n, Bytes(ciphertext), static_cast<int>(ciphertext.size())) != 1) ||
      EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, kAeadTagSize, tag) != 1) {
    return OpenSslError("aead: open", Code::kIOError);
  }
  if (EVP_DecryptFinal_ex(ctx, Bytes(out + ciphertext.size()), &n) != 1) {
    DrainOpenSslErrors();
    return Status::Corruption("aead: open", "authentication failed");
  }
  return Status::Ok();
}

Result<std::string> AeadCipher::Seal(std::string_view nonce, std::string_view aad, std::string_view plaintext) {
  std::string out(plaintext.size() + kAeadTagSize, '\0');
  CAPSULE_RETURN_IF_ERROR(Seal(nonce, aad, plaintext, out.data()));
  return out;
}

Result<std::string> AeadCipher::Open(std::string_view nonce, std::string_view aad, std::string_view sealed) {
  if (sealed.size() < kAeadTagSize) return Status::Corruption("aead: open", "shorter than a tag");
  std::string out(sealed.size() - kAeadTagSize, '\0');
  CAPSULE_RETURN_IF_ERROR(Open(nonce, aad, sealed, out.data()));
  return out;
}

}  // namespace capsule
