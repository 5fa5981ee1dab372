// Checking that bytes are already canonical JSON (canonical_json.h) without parsing them into
// a document or writing them again: a scanner that walks the text once and says whether
// CanonicalJson(ParseJson(text)) would give back exactly these bytes.
//
// It is exact in one direction only: whatever it accepts, ParseJson accepts and CanonicalJson
// writes back byte for byte (same limits: depth, 64-bit integers, finite doubles; same
// escapes; valid UTF-8; keys sorted by their bytes at every depth, no key twice). It may
// refuse a text that is canonical only where that saves complexity, and says so below; the
// caller then asks the slow path (ParseJson, CanonicalJson), which decides and names the fault.
//
// Thread-safety: a scanner is used by one thread; it holds views into the caller's text.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace capsule {

// Whether `text` is UTF-8 as RFC 3629 has it (no overlong form, no surrogate, nothing past
// U+10FFFF): what a string in a JSON document of ours may hold.
bool IsUtf8(std::string_view text);

class CanonicalScanner {
 public:
  explicit CanonicalScanner(std::string_view text) : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()) {}

  // Where the scanner is, as an offset into the text.
  size_t offset() const { return static_cast<size_t>(p_ - begin_); }
  bool AtEnd() const { return p_ == end_; }
  bool Peek(char c) const { return p_ != end_ && *p_ == c; }

  // Consumes `literal` when the text goes on with exactly it.
  bool Literal(std::string_view literal);
  // A canonical integer from 1 to 2^64 - 1 (no sign, no leading zero, no fraction).
  bool PositiveInteger(uint64_t* value);
  // A string in canonical escaping and valid UTF-8. `raw` gets the bytes between the quotes;
  // `escaped` says whether any escape is among them (then raw is not the string's value).
  bool String(std::string_view* raw, bool* escaped);
  // Exactly 64 lowercase hex digits as a string: "0123...".
  bool HexString64(std::string_view* hex);
  // Any canonical JSON value whose outermost array or object would sit at nesting `depth`
  // (the document's outermost is 1; deeper than kMaxJsonDepth is refused).
  bool Value(size_t depth);
  // A canonical object at nesting `depth`.
  bool Object(size_t depth);

 private:
  bool Array(size_t depth);
  bool Number();

  const char* begin_;
  const char* p_;
  const char* end_;
};

// The value of a string that CanonicalScanner::String accepted with escapes (its raw bytes).
std::string DecodeCanonicalString(std::string_view raw);

}  // namespace capsule
