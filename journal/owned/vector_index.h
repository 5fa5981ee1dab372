// The vector index (man/capsule.5, SEARCH): one HNSW graph (hnswlib) per embedding model over
// the vectors the journal's events carry (the embeddings table), kept in
// .capsule/vector_index/ as two files per model, named by the first 16 hex digits of the
// SHA-256 of the model's name:
//   KEY.hnsw  the graph in hnswlib's own saveIndex layout; its labels are journal positions
//   KEY.json  its head: {"dims","engine":"hnswlib","format":1,"hnsw":{...},"last_event_id",
//             "last_position","model","sha256" (of KEY.hnsw),"vectors"}
// The journal is the truth and the index a derived file, like the owned-state database: it is
// rebuilt from the embeddings table when missing, damaged (its head unreadable, KEY.hnsw not the
// bytes its head names) or stale (the model's vectors now are not those it was built from),
// and never taken from elsewhere: a receiver rebuilds it from the journal it received.
// The build is deterministic (vectors inserted one at a time in journal order, a fixed
// seed), so two machines with the same journal answer the same queries.
//
// Vectors are compared by cosine similarity (normalised, hnswlib's inner-product space); a
// vector of zero length is left out, as is one whose length is not the model's (the length
// of its first vector).
//
// Thread-safety: plain functions; a build holds flock(2) on .capsule/vector_index/.lock.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "journal/owned/sqlite.h"

namespace capsule::owned {

inline constexpr char kVectorIndexDir[] = ".capsule/vector_index";
// HNSW's parameters: links per node, the candidate list while building, the random seed, and
// the least candidate list while searching (recall at k = 10 over 10,000 random 384-dimension
// vectors is at least 0.95 with these; vector_index_test).
inline constexpr size_t kHnswM = 32;
inline constexpr size_t kHnswEfConstruction = 64;
inline constexpr size_t kHnswSeed = 100;
inline constexpr size_t kHnswMinEfSearch = 512;

struct VectorHit {
  int64_t position = 0;  // journal_events.position
  double similarity = 0;  // cosine, from -1 to 1
};

struct ModelVectors {
  std::string model;
  int64_t dims = 0;     // the length of its first vector
  int64_t vectors = 0;  // of that length
};

// The models the embeddings table holds, by name.
Result<std::vector<ModelVectors>> ListModels(Database& db);

// The `k` nearest vectors of `model` to `query` (any length > 0), rebuilding the model's index
// first when it is missing, damaged or stale. InvalidArgument when the query's length is not the
// model's dims; NotFound, naming the models there are, when no event carries `model`.
Result<std::vector<VectorHit>> QueryVectors(const std::string& capsule_dir, Database& db, const std::string& model,
                                            const std::vector<float>& query, size_t k);

// Rebuilds every model's index and removes the files of models no longer there (reindex).
// Returns how many models were built.
Result<size_t> RebuildVectorIndexes(const std::string& capsule_dir, Database& db);

// What is damaged in .capsule/vector_index/ (offline: the files alone, no database): each
// problem names the file and why. Missing or stale files are no problem (a search rebuilds
// them).
std::vector<std::string> CheckVectorIndexes(const std::string& capsule_dir);

// A model's graph loaded once for many queries (the benchmark's in-memory figure). hnswlib's
// headers define functions out of line, so only vector_index.cc includes them.
class VectorGraph {
 public:
  // Loads the graph of `model` as it is on disk (after a QueryVectors or a rebuild), its bytes
  // checked against its head first.
  static Result<std::unique_ptr<VectorGraph>> Load(const std::string& capsule_dir, const std::string& model);
  ~VectorGraph();
  // The `k` nearest to `query` (normalised here), nearest first, with ef at least kHnswMinEfSearch.
  std::vector<VectorHit> Nearest(const std::vector<float>& query, size_t k) const;

 private:
  struct Impl;
  explicit VectorGraph(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The exact `k` nearest by brute force over the embeddings table (benchmarks and tests).
Result<std::vector<VectorHit>> BruteForceVectors(Database& db, const std::string& model, const std::vector<float>& query,
                                                 size_t k);

}  // namespace capsule::owned
