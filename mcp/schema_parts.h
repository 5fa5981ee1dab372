// Pieces the tools' input schemas are built from, so that one rule (an event id, a time, a
// conversation) reads the same in every tool.
//
// Thread-safety: plain functions.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"

namespace capsule::mcp {

// A non-empty string.
inline Json NameSchema(const std::string& description) {
  return {{"type", "string"}, {"minLength", 1}, {"description", description}};
}

// Any string, the empty one too.
inline Json TextSchema(const std::string& description) {
  return {{"type", "string"}, {"description", description}};
}

// The id of a journal event: 64 lower-case hex digits.
inline Json EventIdSchema(const std::string& description) {
  return {{"type", "string"},
          {"minLength", 64},
          {"maxLength", 64},
          {"pattern", "^[0-9a-f]{64}$"},
          {"description", description}};
}

// A UTC RFC 3339 time, as the journal writes them: 2026-12-02T16:40:00Z, a fraction allowed.
inline Json TimeSchema(const std::string& description) {
  return {{"type", "string"},
          {"format", "date-time"},
          {"maxLength", 64},
          {"pattern", "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\\.[0-9]+)?Z$"},
          {"description", description}};
}

inline Json ConversationSchema() {
  Json schema = NameSchema("The conversation's id (default main)");
  schema["default"] = "main";
  return schema;
}

// An object of exactly these properties (no others), `required` among them.
inline Json ObjectSchema(Json properties, const std::vector<std::string>& required) {
  Json schema = {{"type", "object"}, {"properties", std::move(properties)}, {"additionalProperties", false}};
  if (!required.empty()) schema["required"] = required;
  return schema;
}

}  // namespace capsule::mcp
