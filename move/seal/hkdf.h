// HKDF-SHA256 (RFC 5869) as its two halves, Extract and Expand, on OpenSSL's EVP_KDF "HKDF".
// HPKE needs the halves separately, with labels in between (see hpke.h).
//
// Thread-safety: free functions, safe from any thread.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule::hkdf {

inline constexpr size_t kSha256Size = 32;

// HKDF-Extract(salt, ikm): a 32-byte pseudorandom key. An empty salt means 32 zero bytes.
Result<std::string> ExtractSha256(std::string_view salt, std::string_view ikm);

// HKDF-Expand(prk, info, length); `length` at most 255 * 32. A length of 0 gives "".
Result<std::string> ExpandSha256(std::string_view prk, std::string_view info, size_t length);

}  // namespace capsule::hkdf
