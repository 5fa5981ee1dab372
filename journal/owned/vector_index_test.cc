// The vector index against brute force: k = 10 recall over 10,000 random 384-dimension
// vectors; a stale index rebuilt before it answers; two models never mixed.
#include "journal/owned/vector_index.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "capsule/base/file_io.h"
#include "capsule/base/temp_dir.h"
#include "journal/owned/schema.h"

namespace capsule::owned {
namespace {

class VectorIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::MakeTempDir("vector-index");
    ASSERT_TRUE(MakeDirectories(dir_ + "/.capsule").ok());
    Result<Database> db = Database::Open(dir_ + "/.capsule/owned.db", Database::Mode::kCreate);
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_ = std::make_unique<Database>(std::move(*db));
    ASSERT_TRUE(MigrateToCurrent(*db_).ok());
  }
  // An event at the next position carrying `vector` by `model` (the rows the projection writes).
  void Add(const std::string& model, const std::vector<float>& vector) {
    ++position_;
    Result<Statement> event = db_->Prepare("INSERT INTO journal_events (position, event_id, clock, machine, seq, ts, "
                                           "type, conversation_id) VALUES (?, ?, ?, 'm', ?, 't', 'user_message', 'main')");
    ASSERT_TRUE(event.ok());
    ASSERT_TRUE(event->Bind(1, position_).Bind(2, "e" + std::to_string(position_)).Bind(3, position_).Bind(4, position_).Run().ok());
    Result<Statement> row = db_->Prepare("INSERT INTO embeddings (position, model, dims, vector) VALUES (?, ?, ?, ?)");
    ASSERT_TRUE(row.ok());
    std::string blob(reinterpret_cast<const char*>(vector.data()), vector.size() * sizeof(float));
    ASSERT_TRUE(row->Bind(1, position_).Bind(2, model).Bind(3, static_cast<int64_t>(vector.size())).BindBlob(4, blob).Run().ok());
  }
  std::vector<float> Random(size_t dims) {
    std::vector<float> v(dims);
    for (float& x : v) x = uniform_(rng_);
    return v;
  }
  std::string dir_;
  std::unique_ptr<Database> db_;
  int64_t position_ = 0;
  std::mt19937 rng_{42};
  std::uniform_real_distribution<float> uniform_{-1.0f, 1.0f};
};

std::set<int64_t> Positions(const std::vector<VectorHit>& hits) {
  std::set<int64_t> out;
  for (const VectorHit& hit : hits) out.insert(hit.position);
  return out;
}

TEST_F(VectorIndexTest, RecallAtTenOverTenThousandRandomVectorsIsAtLeast095) {
  constexpr size_t kVectors = 10000, kDims = 384, kQueries = 50, kK = 10;
  ASSERT_TRUE(db_->Execute("BEGIN").ok());
  for (size_t i = 0; i < kVectors; ++i) Add("m384", Random(kDims));
  ASSERT_TRUE(db_->Execute("COMMIT").ok());
  size_t found = 0;
  for (size_t q = 0; q < kQueries; ++q) {
    std::vector<float> query = Random(kDims);
    Result<std::vector<VectorHit>> hnsw = QueryVectors(dir_, *db_, "m384", query, kK);
    ASSERT_TRUE(hnsw.ok()) << hnsw.status().message();
    Result<std::vector<VectorHit>> exact = BruteForceVectors(*db_, "m384", query, kK);
    ASSERT_TRUE(exact.ok());
    ASSERT_EQ(hnsw->size(), kK);
    ASSERT_EQ(exact->size(), kK);
    for (size_t i = 1; i < kK; ++i) EXPECT_GE((*hnsw)[i - 1].similarity, (*hnsw)[i].similarity) << "nearest first";
    std::set<int64_t> truth = Positions(*exact);
    for (int64_t p : Positions(*hnsw)) found += truth.count(p);
  }
  double recall = static_cast<double>(found) / (kQueries * kK);
  RecordProperty("recall_at_10", std::to_string(recall));
  EXPECT_GE(recall, 0.95) << "recall " << recall;
}

TEST_F(VectorIndexTest, AStaleIndexIsRebuiltAndModelsNeverMix) {
  for (int i = 0; i < 20; ++i) Add("a", Random(8));
  std::vector<float> target = Random(8);
  ASSERT_TRUE(QueryVectors(dir_, *db_, "a", target, 5).ok());  // builds a's graph
  Add("b", target);  // the very vector, under another model of the same length
  Result<std::vector<VectorHit>> a = QueryVectors(dir_, *db_, "a", target, 30);
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->size(), 20u);
  EXPECT_FALSE(Positions(*a).count(position_)) << "model b's vector answered a query of model a";
  Add("a", target);  // now a has it too: the graph is stale and rebuilt before answering
  a = QueryVectors(dir_, *db_, "a", target, 1);
  ASSERT_TRUE(a.ok());
  ASSERT_EQ(a->size(), 1u);
  EXPECT_EQ((*a)[0].position, position_);
  EXPECT_NEAR((*a)[0].similarity, 1.0, 1e-5);
  Result<std::vector<VectorHit>> b = QueryVectors(dir_, *db_, "b", target, 30);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(Positions(*b), (std::set<int64_t>{position_ - 1}));
  EXPECT_TRUE(CheckVectorIndexes(dir_).empty());
  Result<std::vector<VectorHit>> wrong = QueryVectors(dir_, *db_, "b", Random(9), 3);
  EXPECT_EQ(wrong.status().message(),
            "the query vector: has 9 numbers; model b's vectors have 8 dims (vectors of two models are never compared)");
}

}  // namespace
}  // namespace capsule::owned
