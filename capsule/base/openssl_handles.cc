#include "capsule/base/openssl_handles.h"

#include <openssl/err.h>

namespace capsule {

std::string DrainOpenSslErrors(const std::string& fallback) {
  std::string reasons;
  while (unsigned long err = ERR_get_error()) {
    char buffer[256];
    ERR_error_string_n(err, buffer, sizeof buffer);
    if (!reasons.empty()) reasons += "; ";
    reasons += buffer;
  }
  return reasons.empty() ? fallback : reasons;
}

Status OpenSslError(const std::string& what, Code code) {
  return Status::Make(code, what, DrainOpenSslErrors());
}

}  // namespace capsule
