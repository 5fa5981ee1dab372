// Scoped owners for OpenSSL objects, one deleter per type, and the error-queue drain that
// turns OpenSSL's reasons into a Status message.
#pragma once

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/ssl.h>

#include <memory>
#include <string>

#include "capsule/base/status.h"

namespace capsule {

template <typename T, void (*Free)(T*)>
struct OpenSslDeleter {
  void operator()(T* p) const { Free(p); }
};

using EvpMdCtxPtr = std::unique_ptr<EVP_MD_CTX, OpenSslDeleter<EVP_MD_CTX, EVP_MD_CTX_free>>;
using EvpCipherCtxPtr =
    std::unique_ptr<EVP_CIPHER_CTX, OpenSslDeleter<EVP_CIPHER_CTX, EVP_CIPHER_CTX_free>>;
using EvpPkeyPtr = std::unique_ptr<EVP_PKEY, OpenSslDeleter<EVP_PKEY, EVP_PKEY_free>>;
using EvpPkeyCtxPtr =
    std::unique_ptr<EVP_PKEY_CTX, OpenSslDeleter<EVP_PKEY_CTX, EVP_PKEY_CTX_free>>;
using EvpMacPtr = std::unique_ptr<EVP_MAC, OpenSslDeleter<EVP_MAC, EVP_MAC_free>>;
using EvpMacCtxPtr = std::unique_ptr<EVP_MAC_CTX, OpenSslDeleter<EVP_MAC_CTX, EVP_MAC_CTX_free>>;
using EvpKdfPtr = std::unique_ptr<EVP_KDF, OpenSslDeleter<EVP_KDF, EVP_KDF_free>>;
using EvpKdfCtxPtr = std::unique_ptr<EVP_KDF_CTX, OpenSslDeleter<EVP_KDF_CTX, EVP_KDF_CTX_free>>;
using BioPtr = std::unique_ptr<BIO, OpenSslDeleter<BIO, BIO_free_all>>;
using SslCtxPtr = std::unique_ptr<SSL_CTX, OpenSslDeleter<SSL_CTX, SSL_CTX_free>>;
using SslPtr = std::unique_ptr<SSL, OpenSslDeleter<SSL, SSL_free>>;

// Empties OpenSSL's thread-local error queue and returns its reasons joined by "; ", or
// `fallback` when the queue was empty.
std::string DrainOpenSslErrors(const std::string& fallback = "unknown OpenSSL failure");

// A Status for a failed OpenSSL call: `what` plus the reasons on the error queue.
Status OpenSslError(const std::string& what, Code code = Code::kInvalidArgument);

}  // namespace capsule
