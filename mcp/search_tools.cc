// memory_search: the agent's messages, facts and notes by words, by an embedding, or both, as
// `capsule search` finds them (journal/owned/search.h; man/capsule.5, SEARCH).
#include "journal/owned/search.h"
#include "mcp/schema_parts.h"
#include "mcp/tools.h"

namespace capsule::mcp {

namespace {

// A reply holds 1 MiB: 100 results of at most 4 KiB of text each fit.
constexpr int kMaxResults = 100;

Result<Json> Search(owned::CapsulePorts& ports, const Json& arguments) {
  owned::SearchRequest request;
  request.text = arguments.value("query", "");
  request.k = arguments.value("k", 10);
  request.all = arguments.value("all", false);
  request.model = arguments.value("model", "");
  if (arguments.contains("kinds")) {
    std::string kinds;
    for (const Json& kind : arguments["kinds"]) kinds += (kinds.empty() ? "" : ",") + kind.get<std::string>();
    CAPSULE_RETURN_IF_ERROR(owned::ParseSearchKinds(kinds, &request));
  }
  if (arguments.contains("vector")) {
    CAPSULE_ASSIGN_OR_RETURN(request.vector, owned::ParseQueryVector(arguments["vector"].dump(), "vector"));
  } else if (!request.model.empty()) {
    return Status::InvalidArgument("model " + request.model, "names the model of a vector; give one");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::vector<owned::SearchHit> hits, owned::Search(ports.capsule_dir(), request));
  Json results = Json::array();
  for (const owned::SearchHit& hit : hits) results.push_back(owned::SearchHitToJson(hit));
  return Json{{"results", std::move(results)}};
}

}  // namespace

std::vector<Tool> SearchTools() {
  return {
      Tool{"memory_search", "Search memory",
           "Finds the agent's messages, facts (with provenance; expired ones only with all) and notes by words "
           "(an exact phrase first, then every word, then any, each by BM25), by a query embedding compared only "
           "with vectors of the same model (cosine), or both fused by reciprocal rank. Each result names its "
           "event_id, kind, source, score and text (cut past 4 KiB); a fact's subject and key lead to memory_why.",
           ObjectSchema({{"query", TextSchema("The words to find; may be empty when vector is given")},
                         {"k",
                          {{"type", "integer"},
                           {"minimum", 1},
                           {"maximum", kMaxResults},
                           {"default", 10},
                           {"description", "How many results, at most (default 10)"}}},
                         {"vector",
                          {{"type", "array"},
                           {"items", {{"type", "number"}}},
                           {"minItems", 1},
                           {"maxItems", 8192},
                           {"description", "The query's embedding by model: compared only with that model's vectors"}}},
                         {"model", NameSchema("The embedding model that made vector (required with it)")},
                         {"kinds",
                          {{"type", "array"},
                           {"items", {{"type", "string"}, {"enum", {"messages", "facts", "notes"}}}},
                           {"minItems", 1},
                           {"description", "Which to search (default: messages, facts and notes)"}}},
                         {"all",
                          {{"type", "boolean"},
                           {"default", false},
                           {"description", "Facts no longer valid (expired or superseded) too"}}}},
                        {}),
           true, OnPorts(Search)},
  };
}

}  // namespace capsule::mcp
