// What the projection indexes for search (man/capsule.5, SEARCH): each message's and each
// remembered fact's text goes into search_text (FTS5, BM25), and the vector an event's data
// may carry, data.embedding = {"model": M, "dims": N, "vector": [N numbers]}, into embeddings.
//
// Thread-safety: pure functions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "journal/event.h"

namespace capsule::owned {

// The longest vector an embedding may carry (the largest embedding models give 3072 or 4096).
inline constexpr size_t kMaxEmbeddingDims = 8192;

struct Embedding {
  std::string model;
  std::vector<float> vector;
};

// The text search_text holds for a message (its content as the messages table stores it: a
// long tool result's first kTrimPrefixBytes) or a fact_remembered (subject, key and value; a
// string value as itself, any other as canonical JSON).
Result<std::string> SearchableText(const journal::Event& event);

// data.embedding when it is well formed: model a non-empty string, dims a whole number from 1
// to kMaxEmbeddingDims, vector an array of exactly dims finite numbers. Otherwise nullopt
// (the event is still searched by its text; its vector is not indexed).
std::optional<Embedding> EmbeddingOf(const Json& data);

// Why data.embedding is not well formed ("" when it is, or when there is none).
std::string EmbeddingProblem(const Json& data);

}  // namespace capsule::owned
