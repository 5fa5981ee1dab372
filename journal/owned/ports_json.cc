#include "journal/owned/ports_json.h"

namespace capsule::owned {

namespace {

Json OrNull(const std::optional<std::string>& value) { return value ? Json(*value) : Json(nullptr); }

}  // namespace

Json MessageToJson(const Message& message) {
  Json out = {{"id", message.id},         {"conversation", message.conversation},
              {"seq", message.seq},       {"role", message.role},
              {"content", message.content}, {"tokens", message.tokens},
              {"ts", message.ts}};
  if (message.tool_call_id) out["tool_call_id"] = *message.tool_call_id;
  if (message.tool_name) out["tool_name"] = *message.tool_name;
  if (message.is_error) out["is_error"] = *message.is_error;
  if (message.provider) out["provider"] = *message.provider;
  if (message.model) out["model"] = *message.model;
  if (message.run_id) out["run_id"] = *message.run_id;
  return out;
}

Json FactToJson(const StoredFact& fact) {
  return {{"id", fact.id},
          {"subject", fact.fact.subject},
          {"key", fact.fact.key},
          {"value", fact.fact.value},
          {"confidence", fact.fact.confidence},
          {"conversation", fact.fact.conversation},
          {"source", fact.source},
          {"valid_from", fact.valid_from},
          {"valid_to", OrNull(fact.valid_to)},
          {"ended_by", OrNull(fact.ended_by)}};
}

Json RunToJson(const RunRecord& run) {
  return {{"run_id", run.run_id},
          {"framework", run.framework},
          {"first_framework", run.first_framework},
          {"thread_key", run.thread_key},
          {"conversation", run.conversation},
          {"status", run.status},
          {"awaiting", OrNull(run.awaiting)},
          {"steps", run.steps},
          {"cost", run.cost},
          {"resumes", run.resumes},
          {"opened_at", run.opened_at},
          {"updated_at", run.updated_at},
          {"closed_at", OrNull(run.closed_at)}};
}

Json SourceToJson(const SourceEvent& source) {
  Json out = {{"id", source.id}, {"found", source.found}};
  if (!source.found) return out;
  out["type"] = source.type;
  out["ts"] = source.ts;
  out["machine"] = source.machine;
  out["conversation"] = source.conversation;
  if (source.message) {
    out["message"] = {{"role", source.message->role},
                      {"seq", source.message->seq},
                      {"content", source.message->content}};
  }
  return out;
}

}  // namespace capsule::owned
