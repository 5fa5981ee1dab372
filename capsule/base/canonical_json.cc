#include "capsule/base/canonical_json.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace capsule {

namespace {

constexpr double kMaxExactInteger = 9007199254740992.0;  // 2^53

// Rewrites whole-valued doubles as integers; fails on NaN and infinities.
bool Normalize(Json& value) {
  switch (value.type()) {
    case Json::value_t::object:
    case Json::value_t::array:
      for (Json& child : value) {
        if (!Normalize(child)) return false;
      }
      return true;
    case Json::value_t::number_float: {
      double d = value.get<double>();
      if (!std::isfinite(d)) return false;
      if (d == std::trunc(d) && std::fabs(d) <= kMaxExactInteger) {
        value = static_cast<int64_t>(d);
      }
      return true;
    }
    default:
      return true;
  }
}

// One pass over the bytes before nlohmann sees them: nesting depth, and each number
// outside strings. Nothing here needs the text to be valid JSON; the parse that follows says
// what else is wrong.
Status CheckJsonLimits(std::string_view text, const std::string& what, Code code) {
  size_t depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        return Status::Make(code, what, "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
      }
    } else if (c == ']' || c == '}') {
      if (depth > 0) --depth;
    } else if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = i + 1;
      bool fraction = false;
      while (end < text.size() && (std::isdigit(static_cast<unsigned char>(text[end])) || text[end] == '.' ||
                                   text[end] == 'e' || text[end] == 'E' || text[end] == '+' || text[end] == '-')) {
        fraction = fraction || text[end] == '.' || text[end] == 'e' || text[end] == 'E';
        ++end;
      }
      std::string number(text.substr(i, end - i));
      std::string shown = number.size() > 40 ? number.substr(0, 40) + "..." : number;
      errno = 0;
      char* parsed_end = nullptr;
      if (!fraction) {
        if (number[0] == '-') {
          (void)std::strtoll(number.c_str(), &parsed_end, 10);
        } else {
          (void)std::strtoull(number.c_str(), &parsed_end, 10);
        }
        if (errno == ERANGE) {
          return Status::Make(code, what,
                              "the integer " + shown + " does not fit in 64 bits (JSON numbers here are kept exactly)");
        }
      } else {
        double value = std::strtod(number.c_str(), &parsed_end);
        if (errno == ERANGE && std::isinf(value)) {
          return Status::Make(code, what, "the number " + shown + " is too large for a double");
        }
      }
      i = end - 1;
    }
  }
  return Status::Ok();
}

}  // namespace

Result<Json> ParseJson(std::string_view text, const std::string& what, Code code) {
  CAPSULE_RETURN_IF_ERROR(CheckJsonLimits(text, what, code));
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Parse again with exceptions for the position and reason of the first fault.
    try {
      Json again = Json::parse(text.begin(), text.end());
      (void)again;
    } catch (const Json::exception& e) {
      std::string why = e.what();
      // nlohmann prefixes "[json.exception.parse_error.101] "; keep the readable part.
      size_t bracket = why.find("] ");
      if (bracket != std::string::npos) why = why.substr(bracket + 2);
      return Status::Make(code, what, "not valid JSON: " + why);
    }
    return Status::Make(code, what, "not valid JSON");
  }
  return value;
}

std::string JsonText(const Json& value, int indent) {
  return value.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

Result<std::string> CanonicalJson(const Json& value, const std::string& what) {
  Json copy = value;
  if (!Normalize(copy)) return Status::InvalidArgument(what, "NaN or infinity has no JSON form");
  try {
    return copy.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::strict);
  } catch (const Json::type_error& e) {
    return Status::InvalidArgument(what, "string is not valid UTF-8");
  }
}

namespace {

// Whether every byte of `s` is printable ASCII other than '"' and '\\': a string written and
// read as it is. Branch-free, so that the compiler checks many bytes at a time (manifests and
// snapshots hold tens of thousands of such strings).
bool IsPlainJsonText(std::string_view s) {
  bool plain = true;
  for (char c : s) {
    const unsigned char u = static_cast<unsigned char>(c);
    plain &= (u >= 0x20) & (u < 0x7f) & (u != '"') & (u != '\\');
  }
  return plain;
}

}  // namespace

void CanonicalWriter::String(std::string_view s) {
  if (!IsPlainJsonText(s)) {
    ok_ = false;
    return;
  }
  text_ += '"';
  text_ += s;
  text_ += '"';
}

bool CanonicalReader::Literal(std::string_view expected) {
  if (text_.substr(pos_, expected.size()) != expected) return false;
  pos_ += expected.size();
  return true;
}

bool CanonicalReader::String(std::string* out) {
  if (pos_ >= text_.size() || text_[pos_] != '"') return false;
  size_t end = text_.find('"', pos_ + 1);
  if (end == std::string_view::npos || !IsPlainJsonText(text_.substr(pos_ + 1, end - pos_ - 1))) return false;
  out->assign(text_.substr(pos_ + 1, end - pos_ - 1));
  pos_ = end + 1;
  return true;
}

bool CanonicalReader::Unsigned(uint64_t* out) {
  size_t start = pos_;
  uint64_t value = 0;
  while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
    const uint64_t digit = static_cast<uint64_t>(text_[pos_] - '0');
    if (value > (UINT64_MAX - digit) / 10) {
      pos_ = start;
      return false;
    }
    value = value * 10 + digit;
    ++pos_;
  }
  const size_t digits = pos_ - start;
  if (digits == 0 || (digits > 1 && text_[start] == '0')) {
    pos_ = start;
    return false;
  }
  *out = value;
  return true;
}

bool IsCanonicalJson(std::string_view text) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return false;
  Result<std::string> canonical = CanonicalJson(value);
  return canonical.ok() && *canonical == text;
}

}  // namespace capsule
