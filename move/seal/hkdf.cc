#include "move/seal/hkdf.h"

#include <openssl/core_names.h>
#include <openssl/kdf.h>

#include "capsule/base/openssl_handles.h"

namespace capsule::hkdf {

namespace {

OSSL_PARAM OctetParam(const char* name, std::string_view bytes) {
  return OSSL_PARAM_construct_octet_string(name, const_cast<char*>(bytes.data()), bytes.size());
}

// One run of OpenSSL's HKDF in `mode` (EXTRACT_ONLY or EXPAND_ONLY).
Result<std::string> RunHkdf(int mode, std::string_view key, std::string_view salt,
                            std::string_view info, size_t length) {
  EvpKdfPtr kdf(EVP_KDF_fetch(nullptr, "HKDF", nullptr));
  if (!kdf) return OpenSslError("hkdf: fetching HKDF", Code::kIOError);
  EvpKdfCtxPtr ctx(EVP_KDF_CTX_new(kdf.get()));
  if (!ctx) return OpenSslError("hkdf: new context", Code::kIOError);
  char digest[] = "SHA256";
  OSSL_PARAM params[6];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
  params[n++] = OctetParam(OSSL_KDF_PARAM_KEY, key);
  if (!salt.empty()) params[n++] = OctetParam(OSSL_KDF_PARAM_SALT, salt);
  if (!info.empty()) params[n++] = OctetParam(OSSL_KDF_PARAM_INFO, info);
  params[n] = OSSL_PARAM_construct_end();
  std::string out(length, '\0');
  if (EVP_KDF_derive(ctx.get(), reinterpret_cast<unsigned char*>(out.data()), out.size(), params) != 1) {
    return OpenSslError("hkdf: derive");
  }
  return out;
}

}  // namespace

Result<std::string> ExtractSha256(std::string_view salt, std::string_view ikm) {
  // OpenSSL leaves the salt unset when it is empty, and HMAC with an empty key is HMAC with
  // HashLen zero bytes, which is what RFC 5869 asks for.
  return RunHkdf(EVP_KDF_HKDF_MODE_EXTRACT_ONLY, ikm, salt, {}, kSha256Size);
}

Result<std::string> ExpandSha256(std::string_view prk, std::string_view info, size_t length) {
  if (length > 255 * kSha256Size) return Status::InvalidArgument("hkdf: expand", "length over 255 * 32");
  if (length == 0) return std::string();
  return RunHkdf(EVP_KDF_HKDF_MODE_EXPAND_ONLY, prk, {}, info, length);
}

}  // namespace capsule::hkdf
