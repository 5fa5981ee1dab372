// Canonical JSON: the one form of every JSON document that capsulefs hashes, signs or
// compares (events, the manifest, the snapshot, stream manifests, jobs).
//
// The form: compact (no space outside strings), UTF-8, every object's keys sorted by their
// UTF-8 bytes at every depth, strings escaped as JSON requires and nothing more (control
// characters as \n \t \b \f \r or \u00XX, '"' and '\\' escaped, all else as is).
// Numbers: an integer is written in decimal with no exponent and no leading zeros. A number
// with a fraction is written in the shortest form that reads back to the same IEEE double
// (for example 0.5, 1e-07). A fractional-typed number whose value is a whole number of
// magnitude at most 2^53 is written as that integer, so 1.0 and 1 are the same value and hash
// the same. NaN and infinities are refused, since JSON has no spelling for them.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "capsule/base/status.h"

namespace capsule {

using Json = nlohmann::json;

// What ParseJson accepts: every document a user or a peer hands us is read within these.
inline constexpr size_t kMaxJsonDepth = 256;  // arrays and objects nested at most this deep

// Parses `text` as one JSON document: the one reader of JSON from outside (a user, a peer, a
// file on disk). It never throws and never recurses without bound. Refused, naming `what`
// and why: text that is not JSON (with where), nesting deeper than kMaxJsonDepth, an integer
// that does not fit in 64 bits (canonical JSON keeps integers exactly, so it is never turned
// into a float), a number too large for a double (1e999). Its code is `code`
// (InvalidArgument for input from a caller, Corruption for stored data).
Result<Json> ParseJson(std::string_view text, const std::string& what,
                       Code code = Code::kInvalidArgument);

// The canonical text of `value`; refuses NaN, infinities and invalid UTF-8, naming `what`.
Result<std::string> CanonicalJson(const Json& value, const std::string& what = "json");

// `value` as compact JSON text for output (a command's --json answer, a log line, a state
// file): never throws. A string whose bytes are not valid UTF-8 (a SQLite text cast from a
// blob, a file's name, a peer's words) has each invalid byte written as U+FFFD, so the
// output is always valid JSON; whatever must keep its bytes exactly goes through
// CanonicalJson, which refuses them instead.
std::string JsonText(const Json& value, int indent = -1);

// Writing large documents of a known shape (the manifest, the snapshot) without building a
// Json first: CanonicalJson's form, key by key, at a fraction of the cost. Only strings that
// need no escape and are plain ASCII are taken; anything else makes ok() false, and the caller
// writes that document through CanonicalJson instead (which escapes and checks UTF-8).
class CanonicalWriter {
 public:
  // Appends `s` as a JSON string, or marks the writer failed (see above).
  void String(std::string_view s);
  void Unsigned(uint64_t n) { Number(n); }
  void Signed(int64_t n) { Number(n); }
  // Punctuation and keys already in canonical form ('{', "\"key\":", ',', ...).
  void Raw(std::string_view s) { text_ += s; }
  // Room for a document of about `bytes`, so that a large one is not copied as it grows.
  void Reserve(size_t bytes) { text_.reserve(bytes); }
  bool ok() const { return ok_; }
  std::string Take() { return std::move(text_); }

 private:
  template <typename Integer>
  void Number(Integer n) {
    char digits[24];
    text_.append(digits, std::to_chars(digits, digits + sizeof(digits), n).ptr);
  }

  std::string text_;
  bool ok_ = true;
};

// Reading large documents of a known shape back the way CanonicalWriter wrote them, without
// building a Json: each call takes the next token if it is exactly what is asked for and
// says whether it was. Only plain ASCII strings without escapes and integers without a sign,
// fraction or leading zero are taken; a caller that meets anything else gives up and reads
// the document with ParseJson instead (which accepts, or refuses with a reason, all JSON).
class CanonicalReader {
 public:
  explicit CanonicalReader(std::string_view text) : text_(text) {}
  // Takes `expected` (punctuation, a quoted key) when the text continues with it.
  bool Literal(std::string_view expected);
  // Takes a string: '"', plain ASCII without '\\', '"'.
  bool String(std::string* out);
  // Takes an unsigned decimal integer that fits in 64 bits.
  bool Unsigned(uint64_t* out);
  bool AtEnd() const { return pos_ == text_.size(); }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

// True when `text` is one JSON document already written in canonical form.
bool IsCanonicalJson(std::string_view text);

}  // namespace capsule
