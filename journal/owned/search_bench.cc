// Benchmark (not a test): search over the owned state.
//  1. capsule reindex of a journal of N messages (default 1,000,000), FTS5 included, beside a
//     bare FTS5 build of the same texts in a fresh database (what the search index adds to the
//     reindex; the reindex without FTS is the difference), in the same run;
//  2. lexical query latency (p50, p99) through Search (a catch-up check, three tiers, the
//     texts read), and of the FTS5 query alone;
//  3. V random 384-dimension vectors (default 100,000): the HNSW build, query latency (p50,
//     p99) with the graph loaded once and through QueryVectors (checked and loaded per query,
//     as a command does), beside brute force over the same vectors in memory and through
//     SQLite, and recall at 10 against brute force;
//  4. peak resident memory after each phase.
//
//   search_bench [WORKDIR] [MESSAGES] [VECTORS]
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/schema.h"
#include "journal/owned/search.h"
#include "journal/owned/vector_index.h"
#include "journal/test_util.h"

namespace capsule::owned {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "search_bench: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

double PeakMiB() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

std::string Ts(int64_t second) {
  std::time_t t = static_cast<std::time_t>(1796083200 + second);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

// A vocabulary of 20,000 words drawn with a Zipf-like skew, as text is.
struct Words {
  std::vector<std::string> words;
  std::vector<double> cumulative;
  Words() {
    double sum = 0;
    for (int i = 0; i < 20000; ++i) {
      words.push_back("w" + std::to_string(i));
      sum += 1.0 / (i + 1);
      cumulative.push_back(sum);
    }
    for (double& c : cumulative) c /= sum;
  }
  const std::string& Draw(std::mt19937& rng) const {
    double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return words[std::lower_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin()];
  }
};

uint64_t GenerateMessages(const std::string& dir, uint64_t count, const Words& words) {
  std::mt19937 rng(7);
  Result<AtomicFile> out = AtomicFile::Create(JoinPath(dir, kJournalPath));
  Check(out.status(), "journal");
  std::string buffer;
  std::optional<std::string> prev;
  uint64_t bytes = 0;
  for (uint64_t n = 1; n <= count; ++n) {
    std::string text;
    const int length = 8 + static_cast<int>(rng() % 40);
    for (int i = 0; i < length; ++i) text += (i ? " " : "") + words.Draw(rng);
    journal::Event event;
    event.clock = event.seq = n;
    event.machine = journal::testing::MachineName(1);
    event.prev = prev;
    event.ts = Ts(static_cast<int64_t>(n));
    event.type = n % 2 ? "user_message" : "assistant_message";
    event.data = {{"text", text}};
    if (n % 2 == 0) event.data.update({{"provider", "openai"}, {"model", "gpt-4.1"}});
    event.id = *event.ComputeId();
    prev = event.id;
    buffer += *event.CanonicalLine();
    buffer += '\n';
    if (buffer.size() > (8 << 20)) {
      Check(out->Append(buffer), "journal");
      bytes += buffer.size();
      buffer.clear();
    }
  }
  Check(out->Append(buffer), "journal");
  bytes += buffer.size();
  Check(out->Commit(), "journal");
  ::unlink(JoinPath(dir, local::kJournalTail).c_str());
  return bytes;
}

struct Latency {
  std::vector<double> ms;
  void Add(Clock::time_point start) { ms.push_back(Since(start) * 1e3); }
  double At(double q) {
    std::sort(ms.begin(), ms.end());
    return ms[std::min(ms.size() - 1, static_cast<size_t>(q * ms.size()))];
  }
  std::string Text() {
    char out[96];
    std::snprintf(out, sizeof out, "p50 %8.3f ms  p99 %8.3f ms  (%zu queries)", At(0.5), At(0.99), ms.size());
    return out;
  }
};

void Lexical(const std::string& dir, uint64_t messages, const Words& words) {
  std::printf("== lexical: %llu messages\n", static_cast<unsigned long long>(messages));
  auto start = Clock::now();
  uint64_t bytes = GenerateMessages(dir, messages, words);
  std::printf("journal               %7.2fs  %.1f MiB generated\n", Since(start), bytes / 1048576.0);
  (void)ReadFile(JoinPath(dir, kJournalPath));
  start = Clock::now();
  Check(OwnedState::Reindex(dir).status(), "reindex");
  double reindex = Since(start);
  std::printf("capsule reindex       %7.2fs  (FTS5 included)  peak RSS %.0f MiB\n", reindex, PeakMiB());

  // The same texts into a bare FTS5 table of the same definition, one transaction.
  Database db = *Database::Open(OwnedDbPath(dir), Database::Mode::kReadOnly);
  const std::string bare = JoinPath(dir, "../fts-only.db");
  ::unlink(bare.c_str());
  start = Clock::now();
  {
    Database fts = *Database::Open(bare, Database::Mode::kCreate);
    Check(fts.Execute(kBulkLoadPragmas), "pragmas");
    Check(fts.Execute("CREATE VIRTUAL TABLE search_text USING fts5 (text, content = '', "
                      "tokenize = 'unicode61 remove_diacritics 2'); BEGIN"), "fts");
    Statement insert = *fts.Prepare("INSERT INTO search_text (rowid, text) VALUES (?, ?)");
    Statement rows = *db.Prepare("SELECT e.position, m.content FROM messages m JOIN journal_events e ON e.event_id = m.message_id");
    while (*rows.Step()) Check(insert.Bind(1, rows.ColumnInt(0)).Bind(2, rows.ColumnText(1)).Run(), "insert");
    Check(fts.Execute("COMMIT"), "commit");
  }
  double fts_only = Since(start);
  std::printf("bare FTS5 build       %7.2fs  (the same texts)  reindex without FTS ~ %.2fs; FTS adds %.0f%%\n", fts_only,
              reindex - fts_only, 100.0 * fts_only / std::max(1e-9, reindex - fts_only));
  ::unlink(bare.c_str());

  std::mt19937 rng(11);
  Latency full, raw;
  for (int q = 0; q < 200; ++q) {
    SearchRequest request;
    request.text = words.Draw(rng) + " " + words.words[100 + rng() % 5000];
    request.notes = false;
    auto at = Clock::now();
    Check(Search(dir, request).status(), "search");
    full.Add(at);
    at = Clock::now();
    Statement fts = *db.Prepare("SELECT rowid FROM search_text WHERE search_text MATCH ? ORDER BY rank LIMIT 10");
    fts.Bind(1, "\"" + request.text.substr(0, request.text.find(' ')) + "\" AND \"" +
                    request.text.substr(request.text.find(' ') + 1) + "\"");
    while (*fts.Step()) {
    }
    raw.Add(at);
  }
  std::printf("search (words)        %s  through Search, k=10\n", full.Text().c_str());
  std::printf("FTS5 query alone      %s  (every word, BM25, k=10)\n", raw.Text().c_str());
}

void Vectors(const std::string& dir, size_t count) {
  constexpr size_t kDims = 384, kK = 10;
  std::printf("== vectors: %zu of %zu dimensions\n", count, kDims);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto random = [&] {
    std::vector<float> v(kDims);
    for (float& x : v) x = uniform(rng);
    return v;
  };
  const std::string path = JoinPath(dir, ".capsule/vectors.db");
  ::unlink(path.c_str());
  Database db = *Database::Open(path, Database::Mode::kCreate);
  Check(db.Execute(kBulkLoadPragmas), "pragmas");
  Check(MigrateToCurrent(db), "schema");
  Check(db.Execute("BEGIN"), "begin");
  Statement event = *db.Prepare("INSERT INTO journal_events VALUES (?, ?, ?, 'm', ?, 't', 'user_message', 'main', NULL)");
  Statement row = *db.Prepare("INSERT INTO embeddings VALUES (?, 'm384', 384, ?)");
  std::vector<float> all;
  for (size_t i = 1; i <= count; ++i) {
    std::vector<float> v = random();
    Check(event.Bind(1, static_cast<int64_t>(i)).Bind(2, "e" + std::to_string(i)).Bind(3, static_cast<int64_t>(i))
              .Bind(4, static_cast<int64_t>(i)).Run(), "event");
    Check(row.Bind(1, static_cast<int64_t>(i)).BindBlob(2, std::string_view(reinterpret_cast<const char*>(v.data()),
                                                                           kDims * sizeof(float))).Run(), "row");
    double norm = 0;
    for (float x : v) norm += x * x;
    for (float x : v) all.push_back(static_cast<float>(x / std::sqrt(norm)));
  }
  Check(db.Execute("COMMIT"), "commit");

  auto start = Clock::now();
  Check(RebuildVectorIndexes(dir, db).status(), "build");
  std::printf("HNSW build            %7.2fs  (M %zu, ef_construction %zu)  peak RSS %.0f MiB\n", Since(start), kHnswM,
              kHnswEfConstruction, PeakMiB());

  start = Clock::now();
  Result<std::unique_ptr<VectorGraph>> graph = VectorGraph::Load(dir, "m384");
  Check(graph.status(), "load");
  std::printf("graph load            %7.3fs  (SHA-256 checked)  peak RSS %.0f MiB\n", Since(start), PeakMiB());
  Latency hnsw, command, brute, brute_sql;
  size_t found = 0;
  for (int q = 0; q < 200; ++q) {
    std::vector<float> query = random();
    std::vector<float> unit = query;
    double norm = 0;
    for (float x : unit) norm += x * x;
    for (float& x : unit) x = static_cast<float>(x / std::sqrt(norm));
    auto at = Clock::now();
    std::vector<VectorHit> result = (*graph)->Nearest(query, kK);
    hnsw.Add(at);
    std::set<size_t> got;
    for (const VectorHit& hit : result) got.insert(static_cast<size_t>(hit.position));
    at = Clock::now();
    std::vector<std::pair<float, size_t>> scored(count);
    for (size_t i = 0; i < count; ++i) {
      float dot = 0;
      for (size_t d = 0; d < kDims; ++d) dot += unit[d] * all[i * kDims + d];
      scored[i] = {-dot, i + 1};
    }
    std::partial_sort(scored.begin(), scored.begin() + kK, scored.end());
    brute.Add(at);
    for (size_t i = 0; i < kK; ++i) found += got.count(scored[i].second);
    if (q < 20) {
      at = Clock::now();
      Check(QueryVectors(dir, db, "m384", query, kK).status(), "query");
      command.Add(at);
      at = Clock::now();
      Check(BruteForceVectors(db, "m384", query, kK).status(), "brute");
      brute_sql.Add(at);
    }
  }
  std::printf("HNSW query            %s  graph in memory, ef %zu; recall at 10: %.3f\n", hnsw.Text().c_str(),
              kHnswMinEfSearch, found / 2000.0);
  std::printf("brute force           %s  the same vectors in memory\n", brute.Text().c_str());
  std::printf("QueryVectors          %s  head checked, SHA-256, graph loaded per query (a command's cost)\n",
              command.Text().c_str());
  std::printf("brute force (SQLite)  %s  every row read from the embeddings table\n", brute_sql.Text().c_str());
  std::printf("peak RSS              %.0f MiB\n", PeakMiB());
}

int Main(int argc, char** argv) {
  std::string work = argc > 1 ? argv[1] : journal::testing::MakeTempDir("search-bench");
  uint64_t messages = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000000;
  size_t vectors = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 100000;
  std::string dir = JoinPath(work, "cap");
  RemoveTree(dir).ok();
  Check(journal::testing::MakeTestCapsule(dir, journal::testing::MachineName(1)), "capsule");
  Words words;
  Lexical(dir, messages, words);
  Vectors(dir, vectors);
  if (!std::getenv("KEEP")) RemoveTree(work).ok();
  return 0;
}

}  // namespace
}  // namespace capsule::owned

int main(int argc, char** argv) { return capsule::owned::Main(argc, argv); }
