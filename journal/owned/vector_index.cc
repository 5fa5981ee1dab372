#include "journal/owned/vector_index.h"

#include <fcntl.h>
#include <hnswlib/hnswlib.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <cmath>
#include <memory>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"

namespace capsule::owned {

namespace {

constexpr int kFormat = 1;

std::string IndexDir(const std::string& capsule_dir) { return JoinPath(capsule_dir, kVectorIndexDir); }
std::string ModelKey(const std::string& model) { return Sha256Hex(model).substr(0, 16); }
std::string Shown(const std::string& key, const char* ext) { return std::string(kVectorIndexDir) + "/" + key + ext; }

// The model's vectors as the embeddings table holds them now.
struct Current {
  ModelVectors model;
  int64_t last_position = 0;
  std::string last_event_id;
};

struct Head {
  std::string model, last_event_id, sha256;
  int64_t dims = 0, vectors = 0, last_position = 0;
};

Json HeadJson(const Head& head) {
  return {{"format", kFormat},
          {"engine", "hnswlib"},
          {"hnsw", {{"M", kHnswM}, {"ef_construction", kHnswEfConstruction}, {"seed", kHnswSeed}, {"space", "cosine"}}},
          {"model", head.model},
          {"dims", head.dims},
          {"vectors", head.vectors},
          {"last_position", head.last_position},
          {"last_event_id", head.last_event_id},
          {"sha256", head.sha256}};
}

Result<Head> ParseHead(const std::string& text, const std::string& shown) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, shown, Code::kCorruption));
  auto bad = [&](const std::string& why) { return Status::Corruption(shown, why); };
  if (!json.is_object() || json.value("format", 0) != kFormat || json.value("engine", "") != "hnswlib") {
    return bad("not a vector index head of format 1 (engine hnswlib)");
  }
  Head head;
  try {
    head.model = json.at("model").get<std::string>();
    head.dims = json.at("dims").get<int64_t>();
    head.vectors = json.at("vectors").get<int64_t>();
    head.last_position = json.at("last_position").get<int64_t>();
    head.last_event_id = json.at("last_event_id").get<std::string>();
    head.sha256 = json.at("sha256").get<std::string>();
  } catch (const Json::exception&) {
    return bad("a member is missing or of the wrong kind");
  }
  if (!IsSha256Hex(head.sha256)) return bad("sha256: must be 64 hex digits");
  return head;
}

bool Normalise(std::vector<float>& v) {
  double norm = 0;
  for (float x : v) norm += static_cast<double>(x) * x;
  if (!(norm > 0) || !std::isfinite(norm)) return false;
  norm = std::sqrt(norm);
  for (float& x : v) x = static_cast<float>(x / norm);
  return true;
}

std::vector<float> Floats(const std::string& blob) {
  std::vector<float> v(blob.size() / sizeof(float));
  std::memcpy(v.data(), blob.data(), v.size() * sizeof(float));
  return v;
}

Result<Current> CurrentOf(Database& db, const std::string& model) {
  Current current;
  current.model.model = model;
  CAPSULE_ASSIGN_OR_RETURN(Statement first, db.Prepare("SELECT dims FROM embeddings WHERE model = ? ORDER BY position LIMIT 1"));
  first.Bind(1, model);
  CAPSULE_ASSIGN_OR_RETURN(bool any, first.Step());
  if (!any) {
    CAPSULE_ASSIGN_OR_RETURN(std::vector<ModelVectors> models, ListModels(db));
    std::string names;
    for (const ModelVectors& m : models) {
      names += (names.empty() ? "" : ", ") + m.model + " (" + std::to_string(m.dims) + " dims)";
    }
    return Status::NotFound("model " + model, "no event carries an embedding of it (models here: " +
                                                  (names.empty() ? std::string("none") : names) + ")");
  }
  current.model.dims = first.ColumnInt(0);
  CAPSULE_ASSIGN_OR_RETURN(Statement count, db.Prepare("SELECT count(*), max(e.position), j.event_id FROM embeddings e "
                                                       "JOIN journal_events j ON j.position = "
                                                       "(SELECT max(position) FROM embeddings WHERE model = ?1 AND dims = ?2) "
                                                       "WHERE e.model = ?1 AND e.dims = ?2"));
  count.Bind(1, model).Bind(2, current.model.dims);
  CAPSULE_ASSIGN_OR_RETURN(bool row, count.Step());
  if (row) {
    current.model.vectors = count.ColumnInt(0);
    current.last_position = count.ColumnInt(1);
    current.last_event_id = count.ColumnText(2);
  }
  return current;
}

bool Matches(const Head& head, const Current& current) {
  return head.model == current.model.model && head.dims == current.model.dims && head.vectors == current.model.vectors &&
         head.last_position == current.last_position && head.last_event_id == current.last_event_id;
}

template <typename T>
void Put(std::string& out, const T& value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof value);
}

// The graph's bytes in the layout of hnswlib's saveIndex (which writes only through a path of
// its own), so that they reach the disk through the durable-write path and loadIndex reads them.
std::string Serialise(const hnswlib::HierarchicalNSW<float>& index) {
  std::string out;
  Put(out, index.offsetLevel0_);
  Put(out, index.max_elements_);
  Put(out, index.cur_element_count);
  Put(out, index.size_data_per_element_);
  Put(out, index.label_offset_);
  Put(out, index.offsetData_);
  Put(out, index.maxlevel_);
  Put(out, index.enterpoint_node_);
  Put(out, index.maxM_);
  Put(out, index.maxM0_);
  Put(out, index.M_);
  Put(out, index.mult_);
  Put(out, index.ef_construction_);
  out.append(index.data_level0_memory_, index.cur_element_count * index.size_data_per_element_);
  for (size_t i = 0; i < index.cur_element_count; i++) {
    unsigned int size = index.element_levels_[i] > 0 ? index.size_links_per_element_ * index.element_levels_[i] : 0;
    Put(out, size);
    if (size) out.append(index.linkLists_[i], size);
  }
  return out;
}

// flock(LOCK_EX) on .capsule/vector_index/.lock, waited for: one builder at a time.
class IndexLock {
 public:
  static Result<IndexLock> Acquire(const std::string& capsule_dir) {
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(IndexDir(capsule_dir)));
    std::string path = JoinPath(IndexDir(capsule_dir), ".lock");
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600));
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return Status::IOError(path + ": flock", errno);
    }
    return IndexLock(std::move(fd));
  }

 private:
  explicit IndexLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

Result<Head> Build(const std::string& capsule_dir, Database& db, const Current& current) {
  const std::string key = ModelKey(current.model.model);
  CAPSULE_ASSIGN_OR_RETURN(Statement rows,
                           db.Prepare("SELECT position, vector FROM embeddings WHERE model = ? AND dims = ? ORDER BY position"));
  rows.Bind(1, current.model.model).Bind(2, current.model.dims);
  const size_t dims = static_cast<size_t>(current.model.dims);
  std::string bytes;
  try {
    hnswlib::InnerProductSpace space(dims);
    hnswlib::HierarchicalNSW<float> index(&space, std::max<size_t>(1, static_cast<size_t>(current.model.vectors)), kHnswM,
                                          kHnswEfConstruction, kHnswSeed);
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      std::vector<float> v = Floats(rows.ColumnText(1));
      if (v.size() != dims || !Normalise(v)) continue;
      index.addPoint(v.data(), static_cast<hnswlib::labeltype>(rows.ColumnInt(0)));
    }
    bytes = Serialise(index);
  } catch (const std::exception& e) {
    return Status::IOError(Shown(key, ".hnsw"), std::string("hnswlib: ") + e.what());
  }
  Head head;
  head.model = current.model.model;
  head.dims = current.model.dims;
  head.vectors = current.model.vectors;
  head.last_position = current.last_position;
  head.last_event_id = current.last_event_id;
  head.sha256 = Sha256Hex(bytes);
  // The graph first, then its head: a head always names a graph that was written whole.
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(IndexDir(capsule_dir), key + ".hnsw"), bytes, 0600));
  CAPSULE_ASSIGN_OR_RETURN(std::string head_text, CanonicalJson(HeadJson(head), "vector index head"));
  CAPSULE_RETURN_IF_ERROR(WriteFileAtomic(JoinPath(IndexDir(capsule_dir), key + ".json"), head_text + "\n", 0600));
  return head;
}

// The head of `key` when its graph is whole (its bytes' SHA-256 is the one the head names).
Result<Head> LoadChecked(const std::string& capsule_dir, const std::string& key) {
  const std::string dir = IndexDir(capsule_dir);
  CAPSULE_ASSIGN_OR_RETURN(std::string head_text, ReadFileBeneath(dir, key + ".json"));
  CAPSULE_ASSIGN_OR_RETURN(Head head, ParseHead(head_text, Shown(key, ".json")));
  if (ModelKey(head.model) != key) return Status::Corruption(Shown(key, ".json"), "names another model: " + head.model);
  Result<std::string> graph = ReadFileBeneath(dir, key + ".hnsw");
  if (!graph.ok()) return Status::Corruption(Shown(key, ".hnsw"), "missing or unreadable: " + graph.status().message());
  if (Sha256Hex(*graph) != head.sha256) {
    return Status::Corruption(Shown(key, ".hnsw"), "damaged: its SHA-256 is not the one " + key + ".json names");
  }
  return head;
}

}  // namespace

Result<std::vector<ModelVectors>> ListModels(Database& db) {
  CAPSULE_ASSIGN_OR_RETURN(Statement rows,
                           db.Prepare("SELECT m.model, m.dims, (SELECT count(*) FROM embeddings e WHERE e.model = m.model "
                                      "AND e.dims = m.dims) FROM (SELECT model, dims, min(position) FROM embeddings "
                                      "GROUP BY model) m ORDER BY m.model"));
  std::vector<ModelVectors> models;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    models.push_back({rows.ColumnText(0), rows.ColumnInt(1), rows.ColumnInt(2)});
  }
  return models;
}

Result<std::vector<VectorHit>> QueryVectors(const std::string& capsule_dir, Database& db, const std::string& model,
                                            const std::vector<float>& query, size_t k) {
  CAPSULE_ASSIGN_OR_RETURN(Current current, CurrentOf(db, model));
  if (static_cast<int64_t>(query.size()) != current.model.dims) {
    return Status::InvalidArgument("the query vector", "has " + std::to_string(query.size()) + " numbers; model " + model +
                                                           "'s vectors have " + std::to_string(current.model.dims) +
                                                           " dims (vectors of two models are never compared)");
  }
  std::vector<float> q = query;
  if (!Normalise(q)) return Status::InvalidArgument("the query vector", "has zero length: no direction to compare");
  const std::string key = ModelKey(model);
  {
    CAPSULE_ASSIGN_OR_RETURN(IndexLock lock, IndexLock::Acquire(capsule_dir));
    Result<Head> head = LoadChecked(capsule_dir, key);
    if (!head.ok() || !Matches(*head, current)) CAPSULE_RETURN_IF_ERROR(Build(capsule_dir, db, current).status());
  }
  std::vector<VectorHit> hits;
  try {
    hnswlib::InnerProductSpace space(static_cast<size_t>(current.model.dims));
    hnswlib::HierarchicalNSW<float> index(&space, JoinPath(IndexDir(capsule_dir), key + ".hnsw"));
    if (index.cur_element_count == 0) return hits;
    index.setEf(std::max(kHnswMinEfSearch, k));
    auto found = index.searchKnn(q.data(), std::min(k, index.cur_element_count));
    while (!found.empty()) {
      hits.push_back({static_cast<int64_t>(found.top().second), 1.0 - static_cast<double>(found.top().first)});
      found.pop();
    }
  } catch (const std::exception& e) {
    return Status::Corruption(Shown(key, ".hnsw"), std::string("hnswlib: ") + e.what() + "; capsule reindex rebuilds it");
  }
  std::reverse(hits.begin(), hits.end());  // nearest first
  return hits;
}

Result<size_t> RebuildVectorIndexes(const std::string& capsule_dir, Database& db) {
  CAPSULE_ASSIGN_OR_RETURN(std::vector<ModelVectors> models, ListModels(db));
  CAPSULE_ASSIGN_OR_RETURN(IndexLock lock, IndexLock::Acquire(capsule_dir));
  std::set<std::string> keep;
  for (const ModelVectors& model : models) {
    CAPSULE_ASSIGN_OR_RETURN(Current current, CurrentOf(db, model.model));
    CAPSULE_RETURN_IF_ERROR(Build(capsule_dir, db, current).status());
    keep.insert(ModelKey(model.model) + ".hnsw");
    keep.insert(ModelKey(model.model) + ".json");
  }
  std::vector<std::string> others;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFileNames(IndexDir(capsule_dir), &others));
  for (const std::string& name : names) {
    if (name == ".lock" || keep.count(name)) continue;
    const std::string path = JoinPath(IndexDir(capsule_dir), name);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::IOError(path, errno);
  }
  return models.size();
}

std::vector<std::string> CheckVectorIndexes(const std::string& capsule_dir) {
  std::vector<std::string> problems;
  const std::string dir = IndexDir(capsule_dir);
  if (!PathExists(dir)) return problems;
  std::vector<std::string> others;
  Result<std::vector<std::string>> names = ListFileNames(dir, &others);
  if (!names.ok()) return {names.status().message()};
  std::set<std::string> heads;
  for (const std::string& name : *names) {
    if (name.size() == 21 && name.ends_with(".json")) heads.insert(name.substr(0, 16));
  }
  for (const std::string& name : *names) {
    if (name == ".lock" || name.starts_with(kTempPrefix)) continue;
    if (name.size() == 21 && name.ends_with(".hnsw") && !heads.count(name.substr(0, 16))) {
      problems.push_back(std::string(kVectorIndexDir) + "/" + name + ": no head " + name.substr(0, 16) +
                         ".json; capsule reindex rebuilds the vector index");
    }
  }
  for (const std::string& key : heads) {
    Result<Head> head = LoadChecked(capsule_dir, key);
    if (!head.ok()) problems.push_back(head.status().message() + "; capsule reindex rebuilds the vector index");
  }
  for (const std::string& name : others) problems.push_back(std::string(kVectorIndexDir) + "/" + name + ": not a file");
  return problems;
}

struct VectorGraph::Impl {
  explicit Impl(size_t dims) : space(dims) {}
  hnswlib::InnerProductSpace space;
  std::unique_ptr<hnswlib::HierarchicalNSW<float>> index;
};

VectorGraph::VectorGraph(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VectorGraph::~VectorGraph() = default;

Result<std::unique_ptr<VectorGraph>> VectorGraph::Load(const std::string& capsule_dir, const std::string& model) {
  const std::string key = ModelKey(model);
  CAPSULE_ASSIGN_OR_RETURN(Head head, LoadChecked(capsule_dir, key));
  auto impl = std::make_unique<Impl>(static_cast<size_t>(head.dims));
  try {
    impl->index = std::make_unique<hnswlib::HierarchicalNSW<float>>(&impl->space, JoinPath(IndexDir(capsule_dir), key + ".hnsw"));
  } catch (const std::exception& e) {
    return Status::Corruption(Shown(key, ".hnsw"), std::string("hnswlib: ") + e.what());
  }
  return std::unique_ptr<VectorGraph>(new VectorGraph(std::move(impl)));
}

std::vector<VectorHit> VectorGraph::Nearest(const std::vector<float>& query, size_t k) const {
  std::vector<VectorHit> hits;
  std::vector<float> q = query;
  if (!Normalise(q) || impl_->index->cur_element_count == 0) return hits;
  impl_->index->setEf(std::max(kHnswMinEfSearch, k));
  auto found = impl_->index->searchKnn(q.data(), std::min(k, impl_->index->cur_element_count));
  while (!found.empty()) {
    hits.push_back({static_cast<int64_t>(found.top().second), 1.0 - static_cast<double>(found.top().first)});
    found.pop();
  }
  std::reverse(hits.begin(), hits.end());
  return hits;
}

Result<std::vector<VectorHit>> BruteForceVectors(Database& db, const std::string& model, const std::vector<float>& query,
                                                 size_t k) {
  CAPSULE_ASSIGN_OR_RETURN(Current current, CurrentOf(db, model));
  std::vector<float> q = query;
  if (static_cast<int64_t>(q.size()) != current.model.dims || !Normalise(q)) {
    return Status::InvalidArgument("the query vector", "not of model " + model + "'s dims, or of zero length");
  }
  CAPSULE_ASSIGN_OR_RETURN(Statement rows, db.Prepare("SELECT position, vector FROM embeddings WHERE model = ? AND dims = ?"));
  rows.Bind(1, model).Bind(2, current.model.dims);
  std::vector<VectorHit> all;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    std::vector<float> v = Floats(rows.ColumnText(1));
    if (!Normalise(v)) continue;
    double dot = 0;
    for (size_t i = 0; i < v.size(); ++i) dot += static_cast<double>(v[i]) * q[i];
    all.push_back({rows.ColumnInt(0), dot});
  }
  size_t n = std::min(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(),
                    [](const VectorHit& a, const VectorHit& b) { return a.similarity > b.similarity; });
  all.resize(n);
  return all;
}

}  // namespace capsule::owned
