#include "fs/document_writes.h"

#include <unistd.h>

#include <cstddef>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/local_files.h"

namespace capsule::fs {
namespace {

// A SAX reader that keeps nothing: only where the parse stopped, and why.
struct PrefixReader {
  size_t error_at = 0;  // 1-based count of bytes read when the parse failed; 0: it did not
  bool null() { return true; }
  bool boolean(bool) { return true; }
  bool number_integer(Json::number_integer_t) { return true; }
  bool number_unsigned(Json::number_unsigned_t) { return true; }
  bool number_float(Json::number_float_t, const Json::string_t&) { return true; }
  bool string(Json::string_t&) { return true; }
  bool binary(Json::binary_t&) { return true; }
  bool start_object(std::size_t) { return true; }
  bool key(Json::string_t&) { return true; }
  bool end_object() { return true; }
  bool start_array(std::size_t) { return true; }
  bool end_array() { return true; }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception&) {
    error_at = position;
    return false;
  }
};

}  // namespace

bool CouldBecomeJson(std::string_view text) {
  PrefixReader reader;
  if (Json::sax_parse(text.begin(), text.end(), &reader)) return true;  // whole already
  // The parser counts the end of the input as one more byte read: a fault found there is the
  // text running out, which more bytes may mend; one found before it never is.
  return reader.error_at > text.size();
}

bool JsonPrefix::Add(std::string_view more) {
  for (size_t i = 0; i < more.size() && ok_; ++i) ok_ = Step(static_cast<unsigned char>(more[i]));
  return ok_;
}

bool JsonPrefix::Step(unsigned char c) {
  switch (token_) {
    case Token::kString:
      return StringByte(c);
    case Token::kEscape:
      return EscapeByte(c);
    case Token::kHex:
      return HexByte(c);
    case Token::kUtf8:
      if (c < utf8_low_ || c > utf8_high_) return false;
      utf8_low_ = 0x80;
      utf8_high_ = 0xBF;
      if (--utf8_left_ == 0) token_ = Token::kString;
      return true;
    case Token::kLiteral:
      if (c != static_cast<unsigned char>(*literal_)) return false;
      if (*++literal_ != '\0') return true;
      token_ = Token::kNone;
      return EndValue();
    case Token::kNumber:
      if (NumberByte(c)) return true;
      // A number ends at the first byte that cannot continue it, which is read on its own.
      if (number_ != Number::kZero && number_ != Number::kInt && number_ != Number::kFraction &&
          number_ != Number::kExponent) {
        return false;
      }
      token_ = Token::kNone;
      if (!EndValue()) return false;
      break;
    case Token::kNone:
      break;
  }
  if (c == ' ' || c == '\t' || c == '\n' || c == '\r') return true;
  switch (expect_) {
    case Expect::kEnd:
      return false;
    case Expect::kColon:
      if (c != ':') return false;
      expect_ = Expect::kValue;
      return true;
    case Expect::kCommaOrClose:
      if (c == ',') {
        expect_ = open_objects_[depth_ - 1] ? Expect::kKey : Expect::kValue;
        return true;
      }
      if (c != (open_objects_[depth_ - 1] ? '}' : ']')) return false;
      --depth_;
      return EndValue();
    case Expect::kKeyOrClose:
      if (c == '}') {
        --depth_;
        return EndValue();
      }
      [[fallthrough]];
    case Expect::kKey:
      if (c != '"') return false;
      token_ = Token::kString;
      in_key_ = true;
      return true;
    case Expect::kValueOrClose:
      if (c == ']') {
        --depth_;
        return EndValue();
      }
      [[fallthrough]];
    case Expect::kValue:
      return BeginValue(c);
  }
  return false;
}

bool JsonPrefix::BeginValue(unsigned char c) {
  if (object_ && depth_ == 0 && c != '{') return false;
  switch (c) {
    case '{':
    case '[':
      if (depth_ == kMaxJsonDepth) return false;
      open_objects_[depth_++] = c == '{';
      expect_ = c == '{' ? Expect::kKeyOrClose : Expect::kValueOrClose;
      return true;
    case '"':
      token_ = Token::kString;
      in_key_ = false;
      return true;
    case '-':
      token_ = Token::kNumber;
      number_ = Number::kMinus;
      return true;
    case 't':
      literal_ = "rue";
      token_ = Token::kLiteral;
      return true;
    case 'f':
      literal_ = "alse";
      token_ = Token::kLiteral;
      return true;
    case 'n':
      literal_ = "ull";
      token_ = Token::kLiteral;
      return true;
    default:
      if (c < '0' || c > '9') return false;
      token_ = Token::kNumber;
      number_ = c == '0' ? Number::kZero : Number::kInt;
      return true;
  }
}

bool JsonPrefix::EndValue() {
  expect_ = depth_ == 0 ? Expect::kEnd : Expect::kCommaOrClose;
  return true;
}

bool JsonPrefix::StringByte(unsigned char c) {
  if (low_surrogate_ == 1) {  // a high surrogate's escape is followed by its low one's at once
    if (c != '\\') return false;
    low_surrogate_ = 2;
    token_ = Token::kEscape;
    return true;
  }
  if (c == '"') {
    token_ = Token::kNone;
    if (!in_key_) return EndValue();
    expect_ = Expect::kColon;
    return true;
  }
  if (c == '\\') {
    token_ = Token::kEscape;
    return true;
  }
  if (c < 0x20) return false;  // a control character is written escaped
  if (c < 0x80) return true;
  // UTF-8, as RFC 3629 draws it: no overlong form, no surrogate, nothing past U+10FFFF.
  utf8_low_ = 0x80;
  utf8_high_ = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    utf8_left_ = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    utf8_left_ = 2;
    if (c == 0xE0) utf8_low_ = 0xA0;
    if (c == 0xED) utf8_high_ = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    utf8_left_ = 3;
    if (c == 0xF0) utf8_low_ = 0x90;
    if (c == 0xF4) utf8_high_ = 0x8F;
  } else {
    return false;
  }
  token_ = Token::kUtf8;
  return true;
}

bool JsonPrefix::EscapeByte(unsigned char c) {
  if (c == 'u') {
    token_ = Token::kHex;
    hex_left_ = 4;
    hex_value_ = 0;
    if (low_surrogate_ == 2) low_surrogate_ = 3;
    return true;
  }
  if (low_surrogate_ == 2) return false;
  if (c != '"' && c != '\\' && c != '/' && c != 'b' && c != 'f' && c != 'n' && c != 'r' && c != 't') return false;
  token_ = Token::kString;
  return true;
}

bool JsonPrefix::HexByte(unsigned char c) {
  uint32_t digit;
  if (c >= '0' && c <= '9') {
    digit = c - '0';
  } else if (c >= 'a' && c <= 'f') {
    digit = c - 'a' + 10;
  } else if (c >= 'A' && c <= 'F') {
    digit = c - 'A' + 10;
  } else {
    return false;
  }
  hex_value_ = hex_value_ * 16 + digit;
  if (--hex_left_ > 0) return true;
  token_ = Token::kString;
  const bool high = hex_value_ >= 0xD800 && hex_value_ <= 0xDBFF;
  const bool low = hex_value_ >= 0xDC00 && hex_value_ <= 0xDFFF;
  if (low_surrogate_ == 3) {
    low_surrogate_ = 0;
    return low;
  }
  if (low) return false;  // a low surrogate alone
  if (high) low_surrogate_ = 1;
  return true;
}

bool JsonPrefix::NumberByte(unsigned char c) {
  const bool digit = c >= '0' && c <= '9';
  const bool e = c == 'e' || c == 'E';
  switch (number_) {
    case Number::kMinus:
      if (!digit) return false;
      number_ = c == '0' ? Number::kZero : Number::kInt;
      return true;
    case Number::kZero:
    case Number::kInt:
      if (digit && number_ == Number::kInt) return true;
      if (c == '.') number_ = Number::kDot;
      else if (e) number_ = Number::kE;
      else return false;
      return true;
    case Number::kDot:
    case Number::kFraction:
      if (digit) number_ = Number::kFraction;
      else if (e && number_ == Number::kFraction) number_ = Number::kE;
      else return false;
      return true;
    case Number::kE:
      if (c == '+' || c == '-') number_ = Number::kExponentSign;
      else if (digit) number_ = Number::kExponent;
      else return false;
      return true;
    case Number::kExponentSign:
    case Number::kExponent:
      if (!digit) return false;
      number_ = Number::kExponent;
      return true;
  }
  return false;
}

Result<std::string> KeepRejected(const DirFd& folder, const std::string& rel, std::string_view content) {
  const std::string kept = std::string(local::kRejectedDir) + "/" + rel;
  // Each folder on the way made beneath the capsule folder held open: a link anywhere on the
  // way refuses the keeping, never sends the bytes where it points.
  const std::string parent = DirName(kept);
  for (size_t end = 0; end != std::string::npos;) {
    end = parent.find('/', end + 1);
    CAPSULE_RETURN_IF_ERROR(folder.MakeDir(parent.substr(0, end), 0700));
  }
  CAPSULE_RETURN_IF_ERROR(folder.WriteFileAtomic(kept, content, 0600));
  return kept;
}

void ForgetRejected(const DirFd& folder, const std::string& rel) {
  (void)folder.Unlink(std::string(local::kRejectedDir) + "/" + rel);  // none kept: nothing to do
}

}  // namespace capsule::fs
