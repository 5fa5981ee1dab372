// Checks a JSON value against a JSON Schema (draft 2020-12), for the part of the language the
// MCP server's tool schemas are written in. The schema a client reads in tools/list is the very
// object this checks arguments against, so what a tool accepts is exactly what it publishes.
//
// Keywords checked: type (a name or a list), enum, const, properties, required,
// additionalProperties (false or a schema), items, minItems, maxItems, minLength, maxLength
// (in code points), pattern, minimum, maximum, allOf, not, if/then/else. Annotations (title,
// description, default, format, examples, $schema, $comment) are not checked. Any other keyword
// is refused by SchemaKeywordsKnown, which the tests run over every tool's schema, so that no
// schema promises a rule this checker would not keep.
//
// Thread-safety: plain functions; compiled patterns are cached under a lock.
#pragma once

#include <string>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::mcp {

// Ok when `value` satisfies `schema`; otherwise InvalidArgument naming the first fault found
// in document order, as "<where>.<path>: <what is wrong>", for example
// "arguments.limit: must be an integer (got a string)" or
// "arguments.source: missing (required: <its description>)"; a fault inside an if/then/else
// branch ends with "; <the branch's description>". Never throws.
Status CheckJsonSchema(const Json& schema, const Json& value, const std::string& where = "arguments");

// Ok when `schema` uses only the keywords above (at every depth); otherwise InvalidArgument
// naming the first unknown keyword and where it is.
Status SchemaKeywordsKnown(const Json& schema, const std::string& where = "schema");

// Ok when `schema` keeps to what clients that map tool schemas onto narrower dialects take, the
// rules the MCP Inspector's --strict check applies: no bare true or false where a schema object
// is expected (only additionalProperties may be one), no "type" given as a list. Otherwise
// InvalidArgument naming the first fault and where it is.
Status SchemaPortable(const Json& schema, const std::string& where = "schema", bool boolean_allowed = false);

}  // namespace capsule::mcp
