#include "capsule/base/canonical_json.h"

#include <cmath>

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

}  // namespace

Result<Json> ParseJson(std::string_view text, const std::string& what, Code code) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    // Parse again with exceptions for the position and reason of the first fault.
    try {
      Json again = Json::parse(text.begin(), text.end());
      (void)again;
    } catch (const Json::parse_error& e) {
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

Result<std::string> CanonicalJson(const Json& value, const std::string& what) {
  Json copy = value;
  if (!Normalize(copy)) return Status::InvalidArgument(what, "NaN or infinity has no JSON form");
  try {
    return copy.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::strict);
  } catch (const Json::type_error& e) {
    return Status::InvalidArgument(what, "string is not valid UTF-8");
  }
}

bool IsCanonicalJson(std::string_view text) {
  Json value = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) return false;
  Result<std::string> canonical = CanonicalJson(value);
  return canonical.ok() && *canonical == text;
}

}  // namespace capsule
