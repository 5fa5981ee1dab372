#include "capsule/base/canonical_scan.h"

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "capsule/base/canonical_json.h"

namespace capsule {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53, as CanonicalJson has it

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

constexpr int LowerHexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// The length of the UTF-8 sequence at `p` (RFC 3629: no overlong form, no surrogate, nothing
// past U+10FFFF), or 0 when it is not one. `p` points at a byte >= 0x80.
size_t Utf8Length(const unsigned char* p, const unsigned char* end) {
  auto cont = [&](size_t i, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return p + i < end && p[i] >= lo && p[i] <= hi;
  };
  unsigned char c = p[0];
  if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
  if (c == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((c >= 0xE1 && c <= 0xEC) || c == 0xEE || c == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (c == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (c == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (c >= 0xF1 && c <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (c == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

// True when the decimal digits `digits` (no sign, no leading zero) are at most `limit`, also
// given in decimal: the integer fits.
bool DigitsAtMost(std::string_view digits, std::string_view limit) {
  if (digits.size() != limit.size()) return digits.size() < limit.size();
  return digits <= limit;
}

// A number with a fraction or an exponent is canonical when it is what CanonicalJson writes
// for the double it reads as: finite, not a whole number it would write as an integer, and in
// the shortest form that reads back (nlohmann's writer is asked, to be exactly it).
bool CanonicalFloat(std::string_view token) {
  std::string text(token);
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || !std::isfinite(value)) return false;
  if (value == std::trunc(value) && std::fabs(value) <= kMaxExactInteger) return false;
  return Json(value).dump() == token;
}

}  // namespace

bool IsUtf8(std::string_view text) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const auto* end = p + text.size();
  while (p < end) {
    if (*p < 0x80) {
      ++p;
      continue;
    }
    const size_t length = Utf8Length(p, end);
    if (length == 0) return false;
    p += length;
  }
  return true;
}

bool CanonicalScanner::Literal(std::string_view literal) {
  if (static_cast<size_t>(end_ - p_) < literal.size() || std::memcmp(p_, literal.data(), literal.size()) != 0) {
    return false;
  }
  p_ += literal.size();
  return true;
}

bool CanonicalScanner::PositiveInteger(uint64_t* value) {
  const char* start = p_;
  if (p_ == end_ || *p_ < '1' || *p_ > '9') return false;
  while (p_ != end_ && IsDigit(*p_)) ++p_;
  std::string_view digits(start, static_cast<size_t>(p_ - start));
  if (!DigitsAtMost(digits, "18446744073709551615")) return false;
  if (p_ != end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E')) return false;  // a double, not an integer
  uint64_t v = 0;
  for (char c : digits) v = v * 10 + static_cast<uint64_t>(c - '0');
  *value = v;
  return true;
}

bool CanonicalScanner::String(std::string_view* raw, bool* escaped) {
  if (p_ == end_ || *p_ != '"') return false;
  const char* start = ++p_;
  bool any_escape = false;
  for (;;) {
    if (p_ == end_) return false;
    unsigned char c = static_cast<unsigned char>(*p_);
    if (c == '"') break;
    if (c < 0x20) return false;  // a control character is always escaped
    if (c == '\\') {
      any_escape = true;
      if (end_ - p_ < 2) return false;
      char e = p_[1];
      if (e == '"' || e == '\\' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        p_ += 2;
        continue;
      }
      // Otherwise only \u00XX (lowercase hex) for a control character without a short form.
      if (e != 'u' || end_ - p_ < 6 || p_[2] != '0' || p_[3] != '0' || (p_[4] != '0' && p_[4] != '1')) return false;
      int low = LowerHexValue(p_[5]);
      if (low < 0) return false;
      int code = (p_[4] - '0') * 16 + low;
      if (code == 0x08 || code == 0x09 || code == 0x0A || code == 0x0C || code == 0x0D) return false;
      p_ += 6;
      continue;
    }
    if (c < 0x80) {
      ++p_;
      continue;
    }
    size_t length = Utf8Length(reinterpret_cast<const unsigned char*>(p_), reinterpret_cast<const unsigned char*>(end_));
    if (length == 0) return false;
    p_ += length;
  }
  *raw = std::string_view(start, static_cast<size_t>(p_ - start));
  *escaped = any_escape;
  ++p_;
  return true;
}

bool CanonicalScanner::HexString64(std::string_view* hex) {
  if (end_ - p_ < 66 || *p_ != '"' || p_[65] != '"') return false;
  // Without a branch per digit: digests are random, and a branch on "digit or letter"
  // mispredicts about every other one (it was an eighth of a journal check).
  static constexpr auto kNotLowerHex = [] {
    std::array<uint8_t, 256> table{};
    for (int c = 0; c < 256; ++c) table[c] = LowerHexValue(static_cast<char>(c)) < 0;
    return table;
  }();
  uint8_t bad = 0;
  for (int i = 1; i <= 64; ++i) bad |= kNotLowerHex[static_cast<unsigned char>(p_[i])];
  if (bad != 0) return false;
  *hex = std::string_view(p_ + 1, 64);
  p_ += 66;
  return true;
}

bool CanonicalScanner::Value(size_t depth) {
  if (p_ == end_) return false;
  switch (*p_) {
    case '{': return Object(depth);
    case '[': return Array(depth);
    case '"': {
      std::string_view raw;
      bool escaped;
      return String(&raw, &escaped);
    }
    case 't': return Literal("true");
    case 'f': return Literal("false");
    case 'n': return Literal("null");
    default: return Number();
  }
}

bool CanonicalScanner::Object(size_t depth) {
  if (depth > kMaxJsonDepth || p_ == end_ || *p_ != '{') return false;
  ++p_;
  if (p_ != end_ && *p_ == '}') {
    ++p_;
    return true;
  }
  std::string_view previous;
  bool previous_escaped = false;
  for (bool first = true;; first = false) {
    std::string_view key;
    bool escaped;
    if (!String(&key, &escaped)) return false;
    if (!first) {
      // Keys strictly increase by their bytes (after unescaping): sorted, none twice.
      bool ordered = escaped || previous_escaped ? DecodeCanonicalString(previous) < DecodeCanonicalString(key)
                                                 : previous < key;
      if (!ordered) return false;
    }
    previous = key;
    previous_escaped = escaped;
    if (p_ == end_ || *p_ != ':') return false;
    ++p_;
    if (!Value(depth + 1)) return false;
    if (p_ == end_) return false;
    if (*p_ == '}') {
      ++p_;
      return true;
    }
    if (*p_ != ',') return false;
    ++p_;
  }
}

bool CanonicalScanner::Array(size_t depth) {
  if (depth > kMaxJsonDepth) return false;
  ++p_;  // '['
  if (p_ != end_ && *p_ == ']') {
    ++p_;
    return true;
  }
  for (;;) {
    if (!Value(depth + 1)) return false;
    if (p_ == end_) return false;
    if (*p_ == ']') {
      ++p_;
      return true;
    }
    if (*p_ != ',') return false;
    ++p_;
  }
}

bool CanonicalScanner::Number() {
  const char* start = p_;
  bool negative = p_ != end_ && *p_ == '-';
  if (negative) ++p_;
  if (p_ == end_ || !IsDigit(*p_)) return false;
  const char* digits = p_;
  if (*p_ == '0') {
    ++p_;
  } else {
    while (p_ != end_ && IsDigit(*p_)) ++p_;
  }
  std::string_view integer(digits, static_cast<size_t>(p_ - digits));
  bool fraction = false;
  if (p_ != end_ && *p_ == '.') {
    fraction = true;
    ++p_;
    if (p_ == end_ || !IsDigit(*p_)) return false;
    while (p_ != end_ && IsDigit(*p_)) ++p_;
  }
  if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
    fraction = true;
    ++p_;
    if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
    if (p_ == end_ || !IsDigit(*p_)) return false;
    while (p_ != end_ && IsDigit(*p_)) ++p_;
  }
  std::string_view token(start, static_cast<size_t>(p_ - start));
  if (fraction) return CanonicalFloat(token);
  // An integer: -0 is written 0; it must fit in 64 bits (int64 when negative).
  if (negative) return integer != "0" && DigitsAtMost(integer, "9223372036854775808");
  return DigitsAtMost(integer, "18446744073709551615");
}

std::string DecodeCanonicalString(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '\\') {
      out.push_back(raw[i]);
      continue;
    }
    char e = raw[++i];
    switch (e) {
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u':
        out.push_back(static_cast<char>((raw[i + 3] - '0') * 16 + LowerHexValue(raw[i + 4])));
        i += 4;
        break;
      default: out.push_back(e); break;  // '"' and '\\'
    }
  }
  return out;
}

}  // namespace capsule
