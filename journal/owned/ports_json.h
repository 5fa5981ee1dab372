// The ports' records as JSON, one spelling for every reader outside the process: the command
// line's --json output and the MCP server's tool results (man/capsule.1, man/capsule-mcp.7).
// An absent optional field is null, except in a message, which leaves out what its role lacks.
//
// Thread-safety: plain functions.
#pragma once

#include "capsule/base/canonical_json.h"
#include "journal/owned/capsule_ports.h"
#include "journal/owned/ports.h"

namespace capsule::owned {

// {"id","conversation","seq","role","content","tokens","ts"} and, when set, "tool_call_id",
// "tool_name", "is_error", "provider", "model", "run_id".
Json MessageToJson(const Message& message);
// {"id","subject","key","value","confidence","conversation","source","valid_from","valid_to",
// "ended_by"}.
Json FactToJson(const StoredFact& fact);
// {"run_id","framework","first_framework","thread_key","conversation","status","awaiting",
// "steps","cost","resumes","opened_at","updated_at","closed_at"}.
Json RunToJson(const RunRecord& run);
// {"id","found"} and, when found, "type","ts","machine","conversation" and, for a message,
// "message": {"role","seq","content"}.
Json SourceToJson(const SourceEvent& source);

}  // namespace capsule::owned
