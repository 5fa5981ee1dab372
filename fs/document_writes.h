// What the mount does with writes to the capsule files whose content is checked (the
// environment spec, schedules, thread files, attachments): the early check that lets a write
// that can never become valid fail at write(2), and the copy kept of what a commit refused.
//
// Thread-safety: pure functions and file writes; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"

namespace capsule::fs {

// Whether `text` could still become one JSON document by what is appended to it: JSON so far
// (a prefix of some JSON text), with nothing but whitespace after a whole value. Empty text
// (or only whitespace) could.
bool CouldBecomeJson(std::string_view text);

// Reads a text a piece at a time and tells whether what it has read so far could still
// become one JSON document by what is appended to it, as CouldBecomeJson does, without
// reading again what it read before: a journal line written in pieces is checked in time
// proportional to its length, whatever the pieces. UTF-8 is checked as JSON requires (no
// overlong form, no surrogate, escapes' surrogates in pairs). Nesting deeper than
// kMaxJsonDepth is refused (no document the project reads may nest deeper).
class JsonPrefix {
 public:
  // `object`: the document must be a JSON object (a journal line), not any value.
  explicit JsonPrefix(bool object = false) : object_(object) {}
  // Reads `more`, the next bytes of the text. False once what was read can no longer begin a
  // JSON document; every call after that is false too. Copy the JsonPrefix first to undo.
  bool Add(std::string_view more);
  bool ok() const { return ok_; }

 private:
  enum class Expect : uint8_t { kValue, kValueOrClose, kKey, kKeyOrClose, kColon, kCommaOrClose, kEnd };
  enum class Token : uint8_t { kNone, kString, kEscape, kHex, kUtf8, kNumber, kLiteral };
  enum class Number : uint8_t { kMinus, kZero, kInt, kDot, kFraction, kE, kExponentSign, kExponent };
  bool Step(unsigned char c);
  bool StringByte(unsigned char c);
  bool EscapeByte(unsigned char c);
  bool HexByte(unsigned char c);
  bool NumberByte(unsigned char c);
  bool BeginValue(unsigned char c);
  bool EndValue();

  bool object_;
  bool ok_ = true;
  Expect expect_ = Expect::kValue;
  Token token_ = Token::kNone;
  bool in_key_ = false;            // the string being read is an object's key
  uint8_t utf8_left_ = 0;          // continuation bytes still due
  unsigned char utf8_low_ = 0x80;  // the range the next continuation byte must fall in
  unsigned char utf8_high_ = 0xBF;
  uint8_t hex_left_ = 0;
  uint32_t hex_value_ = 0;
  uint8_t low_surrogate_ = 0;  // after a high surrogate: 1, its \ is due; 2, its u is due; 3, its digits
  Number number_ = Number::kMinus;
  const char* literal_ = nullptr;  // the rest of true, false or null still due
  size_t depth_ = 0;
  bool open_objects_[kMaxJsonDepth] = {};  // for each open container, whether it is an object
};

// Keeps `content`, the bytes of the capsule file `rel` that a commit refused, in
// .capsule/rejected/<rel> beneath the capsule folder `folder` (durably, 0600, replacing an
// earlier refused copy; no link followed on the way). Returns where, relative to the folder.
Result<std::string> KeepRejected(const DirFd& folder, const std::string& rel, std::string_view content);

// A commit of `rel` succeeded: the refused copy, if any, is stale and goes.
void ForgetRejected(const DirFd& folder, const std::string& rel);

}  // namespace capsule::fs
