// memory_recall, memory_remember, memory_expire and memory_why: the memory port, and the
// source of a belief.
#include "journal/owned/ports_json.h"
#include "mcp/history_page.h"
#include "mcp/schema_parts.h"
#include "mcp/tools.h"

namespace capsule::mcp {

namespace {

constexpr char kSourceHelp[] =
    "Provenance: the id of the journal event the fact came from, usually the message that said it (the id "
    "history_append returns). A fact without one is refused";

std::optional<std::string> AsOf(const Json& arguments) {
  auto it = arguments.find("as_of");
  if (it == arguments.end()) return std::nullopt;
  return it->get<std::string>();
}

Json FactList(const std::vector<owned::StoredFact>& facts) {
  Json out = Json::array();
  for (const owned::StoredFact& fact : facts) out.push_back(owned::FactToJson(fact));
  return out;
}

Result<Json> Recall(owned::CapsulePorts& ports, const Json& arguments) {
  const std::string subject = arguments["subject"].get<std::string>();
  std::vector<std::string> keys;
  if (arguments.contains("keys")) {
    for (const Json& key : arguments["keys"]) keys.push_back(key.get<std::string>());
  }
  std::optional<std::string> as_of = AsOf(arguments);
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::StoredFact> facts, ports.Recall(subject, keys, as_of));
  return Json{{"subject", subject}, {"as_of", as_of ? Json(*as_of) : Json(nullptr)}, {"facts", FactList(facts)}};
}

Result<Json> Remember(owned::CapsulePorts& ports, const Json& arguments) {
  owned::Fact fact;
  fact.subject = arguments["subject"].get<std::string>();
  fact.key = arguments["key"].get<std::string>();
  fact.value = arguments["value"];
  fact.confidence = arguments.value("confidence", 1.0);
  fact.conversation = arguments.value("conversation", "main");
  owned::Provenance provenance{arguments.value("source", "")};
  CAPSULE_ASSIGN_OR_RETURN(owned::StoredFact stored, ports.Remember(fact, provenance));
  return Json{{"fact", owned::FactToJson(stored)}};
}

Result<Json> Expire(owned::CapsulePorts& ports, const Json& arguments) {
  const std::string subject = arguments["subject"].get<std::string>();
  const std::string key = arguments["key"].get<std::string>();
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::StoredFact> valid, ports.Recall(subject, {key}));
  CAPSULE_RETURN_IF_ERROR(ports.Expire(subject, key, owned::Provenance{arguments["source"].get<std::string>()}));
  // The fact as it stands now: ended, still there as of before.
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::StoredFact> history, ports.FactHistory(subject));
  for (const owned::StoredFact& fact : history) {
    if (!valid.empty() && fact.id == valid.back().id) return Json{{"fact", owned::FactToJson(fact)}};
  }
  return Json{{"fact", nullptr}};
}

Result<Json> Why(ToolContext& context, const Json& arguments) {
  owned::CapsulePorts& ports = context.ports;
  const std::string subject = arguments["subject"].get<std::string>();
  const std::string key = arguments["key"].get<std::string>();
  std::optional<std::string> as_of = AsOf(arguments);
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::StoredFact> facts, ports.Recall(subject, {key}, as_of));
  if (facts.empty()) {
    return Status::NotFound("fact " + subject + "/" + key,
                            "not believed " + (as_of ? "as of " + *as_of : std::string("now")) +
                                " (memory_recall with an earlier as_of shows what was)");
  }
  const owned::StoredFact& fact = facts.back();
  CAPSULE_ASSIGN_OR_RETURN(owned::SourceEvent source, ports.Source(fact.source));
  Json out = {{"fact", owned::FactToJson(fact)}, {"source", owned::SourceToJson(source)}};
  if (source.message) {  // its content cut as in a page of history
    Json message = BoundedMessageJson(*source.message, context.agent);
    for (const char* field : {"content", "content_cut"}) {
      if (message.contains(field)) out["source"]["message"][field] = message[field];
    }
  }
  return out;
}

Json SubjectKeySchema(Json extra, std::vector<std::string> required) {
  Json properties = {{"subject", NameSchema("Whom or what the fact is about, e.g. user")},
                     {"key", NameSchema("Which fact about the subject, e.g. language")}};
  for (auto& [name, schema] : extra.items()) properties[name] = schema;
  required.insert(required.begin(), {"subject", "key"});
  return ObjectSchema(std::move(properties), required);
}

}  // namespace

std::vector<Tool> MemoryTools() {
  const Json as_of = TimeSchema("UTC RFC 3339 time, e.g. 2026-12-02T16:40:00Z: what was believed then (default: now)");
  return {
      Tool{"memory_recall", "Recall facts about a subject",
           "The facts believed about a subject now, or as of a time: each with its value, confidence, provenance "
           "(source) and validity (valid_from, valid_to). Only the given keys when keys is set.",
           ObjectSchema({{"subject", NameSchema("Whom or what the facts are about, e.g. user")},
                         {"keys",
                          {{"type", "array"},
                           {"items", NameSchema("A key")},
                           {"description", "Only these keys (default: every key)"}}},
                         {"as_of", as_of}},
                        {"subject"}),
           true, OnPorts(Recall)},
      Tool{"memory_remember", "Remember a fact",
           "Remembers a fact as a journal event, with its provenance: the id of the journal event it came from. "
           "A valid fact of the same subject and key ends where this one begins (it stays queryable as of before). "
           "Refused without provenance, or when the source is not an event of the journal.",
           SubjectKeySchema({{"value",
                              {{"not", {{"type", "null"}}}, {"description", "The fact's value: any JSON but null"}}},
                             {"confidence",
                              {{"type", "number"},
                               {"minimum", 0},
                               {"maximum", 1},
                               {"default", 1},
                               {"description", "How sure, from 0 to 1 (default 1)"}}},
                             {"conversation", ConversationSchema()},
                             {"source", EventIdSchema(kSourceHelp)}},
                            {"value", "source"}),
           false, OnPorts(Remember)},
      Tool{"memory_expire", "Expire a fact",
           "Ends the valid fact of a subject and key (soft expiry: it stays queryable as of before), naming the "
           "event that shows it wrong as source. Refused when no such fact is valid.",
           SubjectKeySchema({{"source", EventIdSchema("The id of the journal event that ends the fact (provenance)")}},
                            {"source"}),
           false, OnPorts(Expire)},
      Tool{"memory_why", "Why a fact is believed",
           "The fact about subject/key valid now (or as of a time) and the journal event it came from, with the "
           "message's text when the source is a message.",
           SubjectKeySchema({{"as_of", as_of}}, {}), true, Why},
  };
}

}  // namespace capsule::mcp
