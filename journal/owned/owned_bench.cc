// Benchmark (not a test): rebuilding the owned-state database from a journal of N events
// (default 1,000,000) against a bare SQLite bulk insert of the same rows into the same schema,
// measured in the same run; and what following the journal adds to each append.
//
//   owned_bench [WORKDIR] [EVENTS] [APPENDS]
//
// The journal is generated directly (one machine, ids computed, canonical lines): a mix of
// messages, tool calls and results (1% over the trim threshold), facts with provenance,
// corrections and expiries, and runs that open, wait, step and close.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/schema.h"
#include "journal/owned/sqlite.h"
#include "journal/test_util.h"

namespace capsule::owned {
namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

void Check(const Status& status, const char* what) {
  if (!status.ok()) {
    std::fprintf(stderr, "owned_bench: %s: %s\n", what, status.message().c_str());
    std::exit(1);
  }
}

std::string Ts(int64_t second) {
  std::time_t t = static_cast<std::time_t>(1796083200 + second);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

std::pair<std::string, Json> NextEvent(std::mt19937& rng, uint64_t n, const std::vector<std::string>& recent) {
  const std::string word = "w" + std::to_string(rng() % 1000);
  const std::string run = "run-" + std::to_string(n / 40);
  switch (rng() % 20) {
    case 0: case 1: case 2: case 3: case 4: case 5:
      return {"user_message", {{"text", "please look at " + word + " and tell me what changed since yesterday"}}};
    case 6: case 7: case 8: case 9:
      return {"assistant_message",
              {{"text", "I looked at " + word + "; three files changed and the tests pass."},
               {"provider", "openai"}, {"model", "gpt-4.1"}, {"run_id", run}}};
    case 10: case 11:
      return {"tool_call", {{"call_id", "c" + std::to_string(n)}, {"name", "read_file"},
                            {"arguments", {{"path", "src/" + word + ".cc"}}}, {"run_id", run}}};
    case 12: case 13: {
      std::string body = rng() % 100 == 0 ? std::string(6000, 'x') + std::to_string(n) : "contents of " + word + " (" +
                                                                       std::to_string(rng() % 5000) + " bytes)";
      return {"tool_result", {{"call_id", "c" + std::to_string(n - 1)}, {"content", body}, {"is_error", false},
                              {"run_id", run}}};
    }
    case 14: case 15:
      return {"fact_remembered", {{"subject", "user-" + std::to_string(rng() % 100)}, {"key", "k" + std::to_string(rng() % 20)},
                                  {"value", word}, {"confidence", 0.75}, {"source", recent[rng() % recent.size()]}}};
    case 16:
      return {"fact_expired", {{"subject", "user-" + std::to_string(rng() % 100)}, {"key", "k" + std::to_string(rng() % 20)},
                               {"source", recent[rng() % recent.size()]}}};
    case 17: return {"run_opened", {{"run_id", run}, {"framework", "langgraph"}, {"thread_key", "t" + run}}};
    case 18: return {"run_awaiting", {{"run_id", run}, {"awaiting", "approval"}}};
    default: return {"run_closed", {{"run_id", run}, {"status", "completed"}, {"cost", 0.01}}};
  }
}

// Writes a journal of `count` events on one machine into the capsule at `dir`.
uint64_t GenerateJournal(const std::string& dir, uint64_t count) {
  std::mt19937 rng(42);
  Result<AtomicFile> out = AtomicFile::Create(JoinPath(dir, kJournalPath));
  Check(out.status(), "journal");
  std::string buffer;
  std::vector<std::string> recent = {std::string(64, '0')};
  std::optional<std::string> prev;
  uint64_t bytes = 0;
  for (uint64_t n = 1; n <= count; ++n) {
    auto [type, data] = NextEvent(rng, n, recent);
    journal::Event event;
    event.clock = n;
    event.seq = n;
    event.machine = journal::testing::MachineName(1);
    event.prev = prev;
    event.ts = Ts(static_cast<int64_t>(n));
    event.type = type;
    event.data = std::move(data);
    event.id = *event.ComputeId();
    prev = event.id;
    if (recent.size() < 64) {
      recent.push_back(event.id);
    } else {
      recent[n % 64] = event.id;
    }
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
  // A fresh tail cache is built by the first writer; drop any stale one.
  ::unlink(JoinPath(dir, local::kJournalTail).c_str());
  return bytes;
}

std::vector<std::string> Tables(Database& db) {
  std::vector<std::string> names;
  Statement tables = *db.Prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
  while (*tables.Step()) names.push_back(tables.ColumnText(0));
  return names;
}

// The baseline: the same rows, read from the rebuilt database and inserted with prepared
// statements into a fresh database of the same schema and pragmas, one transaction, synced.
double BareBulkInsert(const std::string& from, const std::string& to, uint64_t* rows_out) {
  ::unlink(to.c_str());
  Database source = *Database::Open(from, Database::Mode::kReadOnly);
  auto start = Clock::now();
  {
    Database target = *Database::Open(to, Database::Mode::kCreate);
    Check(target.Execute(kBulkLoadPragmas), "pragmas");
    Check(MigrateToCurrent(target), "schema");
    Check(target.Execute("BEGIN"), "begin");
    uint64_t rows = 0;
    for (const std::string& table : Tables(source)) {
      if (table == "owned_meta") continue;
      Statement select = *source.Prepare("SELECT * FROM " + table);
      const int columns = select.ColumnCount();
      std::string marks;
      for (int c = 0; c < columns; ++c) marks += c ? ",?" : "?";
      Statement insert = *target.Prepare("INSERT INTO " + table + " VALUES (" + marks + ")");
      while (*select.Step()) {
        for (int c = 0; c < columns; ++c) {
          switch (select.ColumnType(c)) {
            case 1: insert.Bind(c + 1, select.ColumnInt(c)); break;      // SQLITE_INTEGER
            case 2: insert.Bind(c + 1, select.ColumnDouble(c)); break;   // SQLITE_FLOAT
            case 4: insert.BindBlob(c + 1, select.ColumnText(c)); break; // SQLITE_BLOB
            case 5: insert.BindNull(c + 1); break;                       // SQLITE_NULL
            default: insert.Bind(c + 1, select.ColumnText(c));
          }
        }
        Check(insert.Run(), "insert");
        ++rows;
      }
    }
    Check(target.Execute("COMMIT"), "commit");
    *rows_out = rows;
  }
  int fd = ::open(to.c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
  return Since(start);
}

// The lower bound: INSERT INTO ... SELECT inside SQLite, no binding at all.
double InsertSelect(const std::string& from, const std::string& to) {
  ::unlink(to.c_str());
  auto start = Clock::now();
  {
    Database target = *Database::Open(to, Database::Mode::kCreate);
    Check(target.Execute(kBulkLoadPragmas), "pragmas");
    Check(MigrateToCurrent(target), "schema");
    Check(target.Execute("ATTACH DATABASE '" + from + "' AS old; BEGIN"), "attach");
    for (const std::string& table : Tables(target)) {
      if (table == "owned_meta") continue;
      Check(target.Execute("INSERT INTO main." + table + " SELECT * FROM old." + table), "insert select");
    }
    Check(target.Execute("COMMIT"), "commit");
  }
  int fd = ::open(to.c_str(), O_RDONLY);
  ::fsync(fd);
  ::close(fd);
  return Since(start);
}

// Microseconds per append: the append alone, then the append and a catch-up.
void PerAppend(const std::string& dir, int appends, bool sync) {
  journal::JournalOptions options;
  options.sync = sync;
  journal::Journal journal = *journal::Journal::OpenForWrite(dir, options);
  OwnedState state = *OwnedState::Open(dir);
  Check(journal.Append("user_message", {{"text", "warm up"}}).status(), "append");  // builds the tail cache
  Check(state.CatchUp().status(), "catch up");
  auto start = Clock::now();
  for (int i = 0; i < appends; ++i) Check(journal.Append("user_message", {{"text", "plain " + std::to_string(i)}}).status(), "append");
  double alone = Since(start) / appends * 1e6;
  start = Clock::now();
  for (int i = 0; i < appends; ++i) {
    Check(journal.Append("user_message", {{"text", "followed " + std::to_string(i)}}).status(), "append");
    Check(state.CatchUp().status(), "catch up");
  }
  double followed = Since(start) / appends * 1e6;
  // A catch-up with nothing new: what every query and port read pays first.
  start = Clock::now();
  for (int i = 0; i < appends; ++i) Check(state.CatchUp().status(), "catch up");
  double idle = Since(start) / appends * 1e6;
  std::printf("append (%s, %d each)      alone %8.1f us   + projection %8.1f us   projection adds %7.1f us (%.2fx); "
              "catch-up with nothing new %6.1f us\n",
              sync ? "fdatasync" : "no sync  ", appends, alone, followed, followed - alone, followed / alone, idle);
}

int Main(int argc, char** argv) {
  std::string work = argc > 1 ? argv[1] : journal::testing::MakeTempDir("owned-bench");
  uint64_t events = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000000;
  int appends = argc > 3 ? std::atoi(argv[3]) : 1000;
  std::string dir = JoinPath(work, "cap");
  RemoveTree(dir).ok();
  Check(journal::testing::MakeTestCapsule(dir, journal::testing::MachineName(1)), "capsule");

  auto start = Clock::now();
  uint64_t bytes = GenerateJournal(dir, events);
  std::printf("journal: %llu events, %.1f MiB (generated in %.1fs)\n", static_cast<unsigned long long>(events),
              bytes / 1048576.0, Since(start));

  // Warm the page cache for both contenders.
  (void)ReadFile(JoinPath(dir, kJournalPath));
  start = Clock::now();
  Result<ProjectionStats> stats = OwnedState::Reindex(dir);
  Check(stats.status(), "reindex");
  double reindex = Since(start);
  struct stat st {};
  ::stat(OwnedDbPath(dir).c_str(), &st);
  std::printf("capsule reindex       %7.2fs  %9.0f events/s  (reads, parses and checks every line, projects, "
              "writes %.1f MiB, syncs, renames)\n",
              reindex, events / reindex, st.st_size / 1048576.0);
  uint64_t rows = 0;
  std::string copy = JoinPath(work, "bare.db");
  double bare = BareBulkInsert(OwnedDbPath(dir), copy, &rows);
  std::printf("bare bulk insert      %7.2fs  %9.0f rows/s    (the same %llu rows, prepared statements, same schema)   "
              "reindex = %.2fx its time\n",
              bare, rows / bare, static_cast<unsigned long long>(rows), reindex / bare);
  double lower = InsertSelect(OwnedDbPath(dir), copy);
  std::printf("INSERT ... SELECT     %7.2fs  (SQLite copying the rows itself: a lower bound)   reindex = %.2fx its time\n",
              lower, reindex / lower);
  ::unlink(copy.c_str());

  PerAppend(dir, appends, false);
  PerAppend(dir, appends / 5, true);
  if (!std::getenv("KEEP")) RemoveTree(work).ok();
  return 0;
}

}  // namespace
}  // namespace capsule::owned

int main(int argc, char** argv) { return capsule::owned::Main(argc, argv); }
