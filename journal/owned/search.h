// Search over what the agent owns (man/capsule.5, SEARCH; capsule search, memory_search):
// messages and facts through the owned-state database's search_text (FTS5, BM25), the notes
// (memory/working_memory.md) read at query time, and vectors through the per-model vector
// index (vector_index.h).
//
// Lexical ranking: the hits holding the query's words as one phrase come first, then those
// holding every word, then those holding any, each group by BM25. Vector ranking: cosine
// similarity within one embedding model, never across two. With both a text and a vector,
// the two rankings are fused by reciprocal rank (score: the sum of 1 / (60 + rank)).
//
// Thread-safety: plain functions; each call opens its own connections.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::owned {

// A hit's text is cut past this many bytes (at a character's start), with kCutMarker after it.
inline constexpr size_t kMaxHitTextBytes = 4096;
inline constexpr char kCutMarker[] = " [...cut]";
inline constexpr size_t kMaxSearchResults = 1000;
// The constant of reciprocal rank fusion (Cormack et al., 2009).
inline constexpr double kRrfConstant = 60;

struct SearchRequest {
  std::string text;                    // the words to find; may be empty when `vector` is given
  std::optional<std::vector<float>> vector;  // the query's embedding by `model`
  std::string model;
  size_t k = 10;
  bool messages = true, facts = true, notes = true;
  bool all = false;  // facts no longer valid (expired or superseded) too
};

struct SearchHit {
  std::string kind;                     // "message", "fact" or "note"
  std::optional<std::string> event_id;  // the message's or the fact_remembered's event id
  std::string source;  // message: its conversation; fact: the event it came from; note: FILE:LINE
  double score = 0;
  std::string match;  // lexical: "phrase", "all" or "any"; "vector"; "hybrid"
  std::string text;
  bool cut = false;
  std::string ts;                          // the event's time (notes: none)
  std::optional<std::string> role;         // messages
  std::optional<std::string> subject, key; // facts: what `capsule why DIR SUBJECT KEY` follows
  std::optional<std::string> valid_to;     // facts ended, with --all
};

// Parses "messages,facts,notes" (any non-empty subset) into `request`.
Status ParseSearchKinds(const std::string& kinds, SearchRequest* request);

// Parses a query embedding: a JSON array of finite numbers (at most kMaxEmbeddingDims).
Result<std::vector<float>> ParseQueryVector(std::string_view text, const std::string& what);

// Searches the capsule at `capsule_dir` (catching its owned state up with the journal, and its
// vector index when stale). InvalidArgument for a request with no words and no vector, a
// vector without a model, or a vector whose length is not the model's; NotFound for a model
// no event carries.
Result<std::vector<SearchHit>> Search(const std::string& capsule_dir, const SearchRequest& request);

Json SearchHitToJson(const SearchHit& hit);

}  // namespace capsule::owned
