#include "capsule/format/keys.h"

#include <openssl/pem.h>

#include <algorithm>
#include <cctype>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"

namespace capsule {

namespace {

int NidOf(KeyType type) { return type == KeyType::kEd25519 ? EVP_PKEY_ED25519 : EVP_PKEY_X25519; }
const char* NameOf(KeyType type) { return type == KeyType::kEd25519 ? "ed25519" : "x25519"; }

}  // namespace

Result<GeneratedKey> GenerateKey(KeyType type) {
  EvpPkeyCtxPtr ctx(EVP_PKEY_CTX_new_id(NidOf(type), nullptr));
  EVP_PKEY* raw = nullptr;
  if (!ctx || EVP_PKEY_keygen_init(ctx.get()) != 1 || EVP_PKEY_keygen(ctx.get(), &raw) != 1) {
    return OpenSslError(std::string("generating an ") + NameOf(type) + " key", Code::kIOError);
  }
  EvpPkeyPtr key(raw);
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_PrivateKey(bio.get(), key.get(), nullptr, nullptr, 0, nullptr, nullptr) != 1) {
    return OpenSslError("encoding the key", Code::kIOError);
  }
  char* data = nullptr;
  long length = BIO_get_mem_data(bio.get(), &data);
  GeneratedKey generated;
  generated.private_pem.assign(data, static_cast<size_t>(length));
  CAPSULE_ASSIGN_OR_RETURN(generated.public_hex, PublicKeyHex(key.get()));
  return generated;
}

Result<std::string> GenerateKeyFile(KeyType type, const std::string& path) {
  if (PathExists(path)) return Status::AlreadyExists(path, "exists; a key file is never overwritten");
  CAPSULE_ASSIGN_OR_RETURN(GeneratedKey key, GenerateKey(type));
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path, 0600));
  CAPSULE_RETURN_IF_ERROR(file.Append(key.private_pem));
  std::fill(key.private_pem.begin(), key.private_pem.end(), '\0');
  CAPSULE_RETURN_IF_ERROR(file.CommitNoReplace());
  return key.public_hex;
}

Result<EvpPkeyPtr> LoadPrivateKey(const std::string& path, KeyType type) {
  CAPSULE_ASSIGN_OR_RETURN(std::string pem, ReadFileBounded(path, kMaxKeyFileBytes, "a private key"));
  BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
  EvpPkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (!key) return OpenSslError(path + ": not a PEM private key");
  if (EVP_PKEY_get_base_id(key.get()) != NidOf(type)) {
    return Status::InvalidArgument(path, std::string("not an ") + NameOf(type) + " key");
  }
  return key;
}

Result<std::string> PublicKeyHex(EVP_PKEY* key) {
  unsigned char raw[32];
  size_t length = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(key, raw, &length) != 1 || length != sizeof raw) {
    return OpenSslError("public key");
  }
  return HexEncode(std::string_view(reinterpret_cast<char*>(raw), length));
}

Result<std::string> LoadPublicKeyHexFile(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBounded(path, kMaxKeyFileBytes, "a public key"));
  std::string hex;
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c))) hex.push_back(static_cast<char>(std::tolower(c)));
  }
  if (hex.size() != 64 || hex.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return Status::InvalidArgument(path, "not a public key (64 hex digits, as capsule keygen prints)");
  }
  return hex;
}

Result<std::string> Ed25519Sign(EVP_PKEY* private_key, std::string_view message) {
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  unsigned char signature[64];
  size_t length = sizeof signature;
  if (!ctx || EVP_DigestSignInit(ctx.get(), nullptr, nullptr, nullptr, private_key) != 1 ||
      EVP_DigestSign(ctx.get(), signature, &length,
                     reinterpret_cast<const unsigned char*>(message.data()), message.size()) != 1) {
    return OpenSslError("signing");
  }
  return std::string(reinterpret_cast<char*>(signature), length);
}

Status Ed25519Verify(const std::string& public_key_hex, std::string_view message,
                     std::string_view signature) {
  CAPSULE_ASSIGN_OR_RETURN(std::string raw, HexDecode(public_key_hex, "public key"));
  EvpPkeyPtr key(EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nullptr,
                                             reinterpret_cast<const unsigned char*>(raw.data()), raw.size()));
  if (!key) return OpenSslError("public key");
  EvpMdCtxPtr ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestVerifyInit(ctx.get(), nullptr, nullptr, nullptr, key.get()) != 1) {
    return OpenSslError("signature check");
  }
  int ok = EVP_DigestVerify(ctx.get(), reinterpret_cast<const unsigned char*>(signature.data()),
                            signature.size(), reinterpret_cast<const unsigned char*>(message.data()),
                            message.size());
  DrainOpenSslErrors();
  if (ok != 1) return Status::InvalidArgument("signature", "does not verify with that key");
  return Status::Ok();
}

}  // namespace capsule
