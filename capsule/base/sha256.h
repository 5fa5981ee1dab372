// SHA-256 through OpenSSL's EVP interface, streaming, plus lowercase hex.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "capsule/base/openssl_handles.h"
#include "capsule/base/progress.h"
#include "capsule/base/status.h"

namespace capsule {

using Sha256Digest = std::array<uint8_t, 32>;

// Feeds bytes in any pieces; Finish() gives the digest of all of them.
// Thread-compatible: one hasher per thread.
class Sha256 {
 public:
  Sha256();
  Sha256(const Sha256& other);  // continues from the same state
  Sha256& operator=(const Sha256&) = delete;
  void Update(std::string_view data);
  // Starts again from nothing, keeping the context (cheaper than a new hasher per line).
  void Reset();
  Sha256Digest Finish();
  std::string FinishHex();

 private:
  EvpMdCtxPtr ctx_;
};

std::string Sha256Hex(std::string_view data);
// Hashes a file's content in one pass; `size_out`, when given, receives its length, and
// `progress`, when given, every byte read as it is read (Add(bytes, 0)).
Result<std::string> Sha256File(const std::string& path, uint64_t* size_out = nullptr, Progress* progress = nullptr);
// The same for the file open as `fd`, read from its start with pread(2) (its offset is left
// as it was); errors name `name`.
Result<std::string> Sha256Fd(int fd, const std::string& name, uint64_t* size_out = nullptr);
// Like Sha256File, and also gives the digest of the file's first `prefix_length` bytes in
// `*prefix_hex` (left empty when the file is shorter).
Result<std::string> Sha256FileWithPrefix(const std::string& path, uint64_t prefix_length,
                                         std::string* prefix_hex, uint64_t* size_out, Progress* progress = nullptr);
// The same for the file open as `fd`, read on from its offset (a file just opened: from its
// start); errors name `path`.
Result<std::string> Sha256FdWithPrefix(int fd, const std::string& path, uint64_t prefix_length,
                                       std::string* prefix_hex, uint64_t* size_out, Progress* progress = nullptr);

std::string HexEncode(std::string_view bytes);
inline std::string HexEncode(const Sha256Digest& digest) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(digest.data()), digest.size()));
}
// Decodes lowercase or uppercase hex; nullopt-like failure as InvalidArgument naming `what`.
Result<std::string> HexDecode(std::string_view hex, const std::string& what);
// `bytes` random bytes from /dev/urandom, in hex.
Result<std::string> RandomHex(size_t bytes);
// True for exactly 64 lowercase hex digits.
bool IsSha256Hex(std::string_view text);

}  // namespace capsule
