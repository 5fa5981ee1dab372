#include "mcp/json_schema.h"

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
// GCC 12 at -O1 with the sanitizers warns of a std::function in <regex> "maybe used
// uninitialized" where it is not (a false positive inside libstdc++'s own code).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <regex>
#pragma GCC diagnostic pop
#include <set>

#include "mcp/reply_bounds.h"

namespace capsule::mcp {

namespace {

// The longest a string under a "pattern" may be allowed to grow: a pattern is matched only
// after maxLength held, so a match never runs over an unbounded string.
constexpr size_t kMaxPatternSubject = 1024;

// A value as an error quotes it: compact JSON, at most a few hundred bytes of it.
std::string Show(const Json& value) { return ExcerptJson(value); }

bool IsWhole(const Json& value) {
  if (value.is_number_integer()) return true;
  if (!value.is_number_float()) return false;
  double d = value.get<double>();
  return std::isfinite(d) && std::floor(d) == d;
}

bool IsType(const std::string& type, const Json& value) {
  if (type == "integer") return IsWhole(value);
  if (type == "number") return value.is_number();
  if (type == "string") return value.is_string();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "null") return value.is_null();
  return false;
}

std::string Article(const std::string& type) {
  if (type == "integer" || type == "object" || type == "array") return "an " + type;
  if (type == "null") return "null";
  return "a " + type;
}

std::string KindOf(const Json& value) {
  if (value.is_null()) return "null";
  if (value.is_boolean()) return "a boolean";
  if (IsWhole(value)) return "an integer";
  if (value.is_number()) return "a number";
  if (value.is_string()) return "a string";
  if (value.is_array()) return "an array";
  return "an object";
}

size_t CodePoints(const std::string& text) {
  size_t n = 0;
  for (unsigned char c : text) n += (c & 0xC0) != 0x80;
  return n;
}

std::string Join(const std::string& where, const std::string& name) { return where + "." + name; }

// The pattern compiled, once per pattern: compiling costs far more than a match. Null when the
// pattern is not a regular expression std::regex reads.
const std::regex* Compiled(const std::string& pattern) {
  static std::mutex mu;
  static std::map<std::string, std::optional<std::regex>> cache;
  std::lock_guard lock(mu);
  auto it = cache.find(pattern);
  if (it == cache.end()) {
    std::optional<std::regex> compiled;
    try {
      compiled.emplace(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      compiled.reset();
    }
    it = cache.emplace(pattern, std::move(compiled)).first;
  }
  return it->second ? &*it->second : nullptr;
}

// A count keyword's value (minLength, maxItems ...), when it is a whole number of at least 0.
std::optional<size_t> Count(const Json& schema, const char* keyword) {
  auto it = schema.find(keyword);
  if (it == schema.end() || !it->is_number_integer() || it->get<int64_t>() < 0) return std::nullopt;
  return static_cast<size_t>(it->get<int64_t>());
}

class Checker {
 public:
  Status Check(const Json& schema, const Json& value, const std::string& where) {
    if (schema.is_boolean()) return schema.get<bool>() ? Status::Ok() : Fail(where, "is not allowed");
    if (!schema.is_object()) return Status::Ok();
    CAPSULE_RETURN_IF_ERROR(CheckType(schema, value, where));
    if (auto it = schema.find("const"); it != schema.end() && *it != value) {
      return Fail(where, "must be " + Show(*it) + " (got " + Show(value) + ")");
    }
    if (auto it = schema.find("enum"); it != schema.end() && it->is_array()) {
      bool found = false;
      std::string choices;
      for (const Json& choice : *it) {
        found = found || choice == value;
        choices += (choices.empty() ? "" : ", ") + Show(choice);
      }
      if (!found) return Fail(where, "must be one of " + choices + " (got " + Show(value) + ")");
    }
    if (value.is_string()) CAPSULE_RETURN_IF_ERROR(CheckString(schema, value.get<std::string>(), where));
    if (value.is_number()) CAPSULE_RETURN_IF_ERROR(CheckNumber(schema, value, where));
    if (value.is_array()) CAPSULE_RETURN_IF_ERROR(CheckArray(schema, value, where));
    if (value.is_object()) CAPSULE_RETURN_IF_ERROR(CheckObject(schema, value, where));
    if (auto it = schema.find("not"); it != schema.end()) {
      Checker probe;
      if (probe.Check(*it, value, where).ok()) return Fail(where, Forbidden(*it));
    }
    if (auto it = schema.find("allOf"); it != schema.end() && it->is_array()) {
      for (const Json& part : *it) CAPSULE_RETURN_IF_ERROR(Check(part, value, where));
    }
    if (auto it = schema.find("if"); it != schema.end()) {
      Checker probe;
      const char* branch = probe.Check(*it, value, where).ok() ? "then" : "else";
      if (auto next = schema.find(branch); next != schema.end()) {
        std::string saved = context_;
        if (next->is_object() && next->contains("description") && (*next)["description"].is_string()) {
          context_ = (*next)["description"].get<std::string>();
        }
        Status status = Check(*next, value, where);
        context_ = saved;
        CAPSULE_RETURN_IF_ERROR(status);
      }
    }
    return Status::Ok();
  }

 private:
  Status Fail(const std::string& where, const std::string& what) const {
    return Status::InvalidArgument(where, context_.empty() ? what : what + "; " + context_);
  }

  // What a "not" says of the values it refuses: {} (every value) is "is not allowed".
  static std::string Forbidden(const Json& refused) {
    if (refused.is_object() && refused.empty()) return "is not allowed";
    if (refused.is_object() && refused.size() == 1 && refused.contains("type") && refused["type"].is_string()) {
      return "must not be " + Article(refused["type"].get<std::string>());
    }
    return "must not match " + Show(refused);
  }

  Status CheckType(const Json& schema, const Json& value, const std::string& where) const {
    auto it = schema.find("type");
    if (it == schema.end()) return Status::Ok();
    std::vector<std::string> types;
    if (it->is_string()) types.push_back(it->get<std::string>());
    if (it->is_array()) {
      for (const Json& t : *it) {
        if (t.is_string()) types.push_back(t.get<std::string>());
      }
    }
    std::string wanted;
    for (size_t i = 0; i < types.size(); ++i) {
      if (IsType(types[i], value)) return Status::Ok();
      wanted += (i == 0 ? "" : i + 1 == types.size() ? " or " : ", ") + Article(types[i]);
    }
    return Fail(where, "must be " + wanted + " (got " + KindOf(value) + ")");
  }

  Status CheckString(const Json& schema, const std::string& text, const std::string& where) const {
    const size_t length = CodePoints(text);
    if (std::optional<size_t> min = Count(schema, "minLength"); min && length < *min) {
      return Fail(where, *min == 1 ? "must not be empty" : "must be at least " + std::to_string(*min) + " characters long");
    }
    if (std::optional<size_t> max = Count(schema, "maxLength"); max && length > *max) {
      return Fail(where, "must be at most " + std::to_string(*max) + " characters long (got " +
                             std::to_string(length) + ")");
    }
    if (auto it = schema.find("pattern"); it != schema.end() && it->is_string()) {
      bool matched = false;
      const std::regex* pattern = Compiled(it->get<std::string>());
      if (pattern != nullptr && text.size() <= kMaxPatternSubject) {
        try {
          matched = std::regex_search(text, *pattern);
        } catch (const std::regex_error&) {
          matched = false;
        }
      }
      if (!matched) return Fail(where, "must match " + it->get<std::string>() + " (got " + Show(text) + ")");
    }
    return Status::Ok();
  }

  Status CheckNumber(const Json& schema, const Json& value, const std::string& where) const {
    const double number = value.get<double>();
    if (auto it = schema.find("minimum"); it != schema.end() && it->is_number() && number < it->get<double>()) {
      return Fail(where, "must be at least " + Show(*it) + " (got " + Show(value) + ")");
    }
    if (auto it = schema.find("maximum"); it != schema.end() && it->is_number() && number > it->get<double>()) {
      return Fail(where, "must be at most " + Show(*it) + " (got " + Show(value) + ")");
    }
    return Status::Ok();
  }

  Status CheckArray(const Json& schema, const Json& value, const std::string& where) {
    if (std::optional<size_t> min = Count(schema, "minItems"); min && value.size() < *min) {
      return Fail(where, "must hold at least " + std::to_string(*min) + " items (got " + std::to_string(value.size()) + ")");
    }
    if (std::optional<size_t> max = Count(schema, "maxItems"); max && value.size() > *max) {
      return Fail(where, "must hold at most " + std::to_string(*max) + " items (got " + std::to_string(value.size()) + ")");
    }
    if (auto it = schema.find("items"); it != schema.end()) {
      for (size_t i = 0; i < value.size(); ++i) {
        CAPSULE_RETURN_IF_ERROR(Check(*it, value[i], where + "[" + std::to_string(i) + "]"));
      }
    }
    return Status::Ok();
  }

  Status CheckObject(const Json& schema, const Json& value, const std::string& where) {
    const Json empty = Json::object();
    auto props = schema.find("properties");
    const Json& properties = props != schema.end() && props->is_object() ? *props : empty;
    if (auto it = schema.find("required"); it != schema.end() && it->is_array()) {
      for (const Json& name : *it) {
        if (!name.is_string() || value.contains(name.get<std::string>())) continue;
        const std::string key = name.get<std::string>();
        std::string about;
        if (auto p = properties.find(key); p != properties.end() && p->is_object() && p->contains("description") &&
                                           (*p)["description"].is_string()) {
          about = ": " + (*p)["description"].get<std::string>();
        }
        return Fail(Join(where, key), "missing (required" + about + ")");
      }
    }
    auto additional = schema.find("additionalProperties");
    for (auto& [key, member] : value.items()) {
      if (auto p = properties.find(key); p != properties.end()) {
        CAPSULE_RETURN_IF_ERROR(Check(*p, member, Join(where, key)));
        continue;
      }
      if (additional == schema.end()) continue;
      if (additional->is_boolean() && !additional->get<bool>()) {
        std::string known;
        for (auto& [name, unused] : properties.items()) known += (known.empty() ? "" : ", ") + name;
        return Fail(where, "unknown argument " + Show(Json(key)) +
                               (known.empty() ? " (this tool takes none)" : " (known: " + known + ")"));
      }
      CAPSULE_RETURN_IF_ERROR(Check(*additional, member, Join(where, key)));
    }
    return Status::Ok();
  }

  std::string context_;  // the description of the if/then branch being checked, for messages
};

const std::set<std::string>& KnownKeywords() {
  static const std::set<std::string> known = {
      "type",     "enum",     "const",     "properties", "required",  "additionalProperties", "items",
      "minItems", "maxItems", "minLength", "maxLength",  "pattern",   "minimum",              "maximum",
      "allOf",    "not",      "if",       "then",      "else",       "title",     "description",          "default",
      "format",   "examples", "$schema",   "$comment"};
  return known;
}

}  // namespace

Status CheckJsonSchema(const Json& schema, const Json& value, const std::string& where) {
  Checker checker;
  return checker.Check(schema, value, where);
}

Status SchemaKeywordsKnown(const Json& schema, const std::string& where) {
  if (schema.is_boolean()) return Status::Ok();
  if (!schema.is_object()) return Status::InvalidArgument(where, "a schema must be an object or a boolean");
  for (auto& [key, member] : schema.items()) {
    if (KnownKeywords().count(key) == 0) return Status::InvalidArgument(where, "keyword " + key + " is not checked");
    if (key == "properties") {
      if (!member.is_object()) return Status::InvalidArgument(where + ".properties", "must be an object");
      for (auto& [name, sub] : member.items()) CAPSULE_RETURN_IF_ERROR(SchemaKeywordsKnown(sub, where + "." + name));
    } else if (key == "items" || key == "additionalProperties" || key == "not" || key == "if" || key == "then" ||
               key == "else") {
      CAPSULE_RETURN_IF_ERROR(SchemaKeywordsKnown(member, where + "/" + key));
    } else if (key == "allOf") {
      if (!member.is_array()) return Status::InvalidArgument(where + "/allOf", "must be an array");
      for (size_t i = 0; i < member.size(); ++i) {
        CAPSULE_RETURN_IF_ERROR(SchemaKeywordsKnown(member[i], where + "/allOf/" + std::to_string(i)));
      }
    } else if (key == "pattern") {
      std::optional<size_t> max = Count(schema, "maxLength");
      if (!max || *max > kMaxPatternSubject) {
        return Status::InvalidArgument(where, "a pattern needs a maxLength of at most " +
                                                  std::to_string(kMaxPatternSubject));
      }
    }
  }
  return Status::Ok();
}

Status SchemaPortable(const Json& schema, const std::string& where, bool boolean_allowed) {
  if (schema.is_boolean()) {
    if (boolean_allowed) return Status::Ok();
    return Status::InvalidArgument(where, "a bare " + Show(schema) + " where a schema object is expected");
  }
  if (!schema.is_object()) return Status::Ok();
  if (auto type = schema.find("type"); type != schema.end() && type->is_array()) {
    return Status::InvalidArgument(where, "\"type\" is a list; one type per schema (anyOf or not for more)");
  }
  for (auto& [key, member] : schema.items()) {
    if (key == "properties" && member.is_object()) {
      for (auto& [name, sub] : member.items()) CAPSULE_RETURN_IF_ERROR(SchemaPortable(sub, where + "." + name, false));
    } else if (key == "allOf" && member.is_array()) {
      for (size_t i = 0; i < member.size(); ++i) {
        CAPSULE_RETURN_IF_ERROR(SchemaPortable(member[i], where + "/allOf/" + std::to_string(i), false));
      }
    } else if (key == "items" || key == "not" || key == "if" || key == "then" || key == "else" ||
               key == "additionalProperties") {
      CAPSULE_RETURN_IF_ERROR(SchemaPortable(member, where + "/" + key, key == "additionalProperties"));
    }
  }
  return Status::Ok();
}

}  // namespace capsule::mcp
