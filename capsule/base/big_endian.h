// Big-endian (network order) integers, as RFC 9180's I2OSP and the sealed envelope write them.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace capsule {

// Writes the low `bytes` bytes of `value` to out[0..bytes), most significant first.
inline void PutBigEndian(char* out, uint64_t value, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) out[bytes - 1 - i] = static_cast<char>(value >> (8 * i) & 0xFF);
}

// I2OSP(value, bytes).
inline std::string BigEndian(uint64_t value, size_t bytes) {
  std::string out(bytes, '\0');
  PutBigEndian(out.data(), value, bytes);
  return out;
}

inline uint32_t GetBigEndian32(const char* in) {
  uint32_t value = 0;
  for (size_t i = 0; i < 4; ++i) value = value << 8 | static_cast<unsigned char>(in[i]);
  return value;
}

}  // namespace capsule
