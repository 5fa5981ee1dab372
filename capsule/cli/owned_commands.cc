// capsule sql, reindex, facts, runs, why. See man/capsule.1.
#include "capsule/cli/cli.h"

#include <sqlite3.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "journal/event.h"
#include "journal/owned/capsule_ports.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/ports_json.h"

namespace capsule::cli {

namespace {

using owned::CapsulePorts;
using owned::Database;
using owned::RunRecord;
using owned::SourceEvent;
using owned::Statement;
using owned::StoredFact;

struct SqlArgs {
  std::string dir, query;
  bool query_given = false;
  double timeout = 0;  // seconds; 0: none
};

struct FactsArgs {
  std::string dir, subject, as_of;
  bool all = false;
};

struct RunsArgs {
  std::string dir;
  bool in_flight = false;
};

struct WhyArgs {
  std::string dir, subject, key, as_of;
};

// A value for tab-separated output: tabs, newlines and backslashes escaped, NULL as \N.
std::string TextCell(const Statement& row, int column) {
  if (row.IsNull(column)) return "\\N";
  std::string out;
  for (char c : row.ColumnText(column)) {
    switch (c) {
      case '\t': out += "\\t"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\\': out += "\\\\"; break;
      default: out += c;
    }
  }
  return out;
}

Json JsonCell(const Statement& row, int column) {
  switch (row.ColumnType(column)) {
    case SQLITE_NULL: return nullptr;
    case SQLITE_INTEGER: return row.ColumnInt(column);
    case SQLITE_FLOAT: return row.ColumnDouble(column);
    case SQLITE_BLOB: {
      static const char kHex[] = "0123456789abcdef";
      std::string hex;
      for (unsigned char c : row.ColumnText(column)) {
        hex += kHex[c >> 4];
        hex += kHex[c & 15];
      }
      return hex;
    }
    default: return row.ColumnText(column);
  }
}

int PrintCanonical(const Json& value) {
  Result<std::string> text = CanonicalJson(value, "output");
  if (!text.ok()) return Fail(text.status());
  std::cout << *text << "\n";
  return kExitOk;
}

// The capsule folder behind DIR (a folder or its mountpoint) for the owned-state ports.
Result<std::unique_ptr<CapsulePorts>> OpenPorts(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string folder, ResolveCapsule(dir));
  return CapsulePorts::Open(folder);
}

// The largest query read from standard input (an endless one is refused as it is read).
constexpr uint64_t kMaxQueryBytes = 1 << 20;

// The query: QUERY itself, or standard input when QUERY is "-" or absent (and standard
// input is not a terminal). `usage` says whether a refusal is of the command's words (no
// query at all) rather than of what standard input held.
Result<std::string> SqlQuery(const SqlArgs& args, bool* usage) {
  *usage = false;
  if (args.query_given && args.query != "-") return args.query;
  if (!args.query_given && ::isatty(STDIN_FILENO)) {
    *usage = true;
    return Status::InvalidArgument("sql", "give a QUERY, or - to read it from standard input");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::string query, ReadStreamBounded(STDIN_FILENO, "standard input", kMaxQueryBytes,
                                                                "a SQL query"));
  if (query.find_first_not_of(" \t\r\n;") == std::string::npos) {
    *usage = true;
    return Status::InvalidArgument("sql", "standard input holds no query");
  }
  return query;
}

// Stops a statement once its deadline has passed: SQLite calls it every 1,000 instructions
// of its virtual machine, and a non-zero answer interrupts the statement (SQLITE_INTERRUPT).
struct SqlDeadline {
  std::chrono::steady_clock::time_point at;
  bool passed = false;
  static int Check(void* self) {
    auto* deadline = static_cast<SqlDeadline*>(self);
    if (std::chrono::steady_clock::now() >= deadline->at) deadline->passed = true;
    return deadline->passed ? 1 : 0;
  }
};

int RunSql(const SqlArgs& args) {
  bool usage = false;
  Result<std::string> query = SqlQuery(args, &usage);
  if (!query.ok()) {
    if (usage) return UsageFailure(query.status().message(), 0, nullptr);
    return Fail(query.status());
  }
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<Database> db = owned::OpenForQuery(*dir);
  if (!db.ok()) return Fail(db.status());
  SqlDeadline deadline;
  if (args.timeout > 0) {
    deadline.at = std::chrono::steady_clock::now() +
                  std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(args.timeout));
    ::sqlite3_progress_handler(db->get(), 1000, &SqlDeadline::Check, &deadline);
  }
  auto failed = [&](const Status& status) {
    if (!deadline.passed) return Fail(status.WithContext("sql"));
    char seconds[32];
    std::snprintf(seconds, sizeof seconds, "%g", args.timeout);
    return Fail(Status::InvalidArgument("sql", std::string("stopped after ") + seconds + " s (--timeout " + seconds +
                                                   "): the query ran too long; nothing was changed"),
                Json{{"timeout", args.timeout}});
  };
  Result<Statement> statement = db->Prepare(*query);
  if (!statement.ok()) return failed(statement.status());
  Json rows = Json::array();
  for (;;) {
    Result<bool> row = statement->Step();
    if (!row.ok()) return failed(row.status());
    if (!*row) break;
    const int columns = statement->ColumnCount();
    if (JsonOutput()) {
      Json object = Json::object();
      for (int c = 0; c < columns; ++c) object[statement->ColumnName(c)] = JsonCell(*statement, c);
      rows.push_back(std::move(object));
    } else {
      for (int c = 0; c < columns; ++c) std::cout << (c ? "\t" : "") << TextCell(*statement, c);
      std::cout << "\n";
    }
  }
  // Not canonical: the columns keep the query's order for a reader, keys of each row as named.
  if (JsonOutput()) std::cout << JsonText(rows) << "\n";
  return kExitOk;
}

int RunReindex(const std::string& dir) {
  Result<std::string> folder = ResolveCapsule(dir);
  if (!folder.ok()) return Fail(folder.status());
  std::unique_ptr<ProgressReporter> progress = MakeProgress();
  Result<owned::ProjectionStats> stats = owned::OwnedState::Reindex(*folder, progress.get());
  if (!stats.ok()) return progress.reset(), Fail(stats.status());
  if (progress) progress->Finish();
  Status vectors = RebuildVectorIndexesOf(*folder);
  if (!vectors.ok()) return Fail(vectors);
  if (JsonOutput()) {
    return PrintJson({{"reindexed", dir}, {"events", stats->events}, {"journal_bytes", stats->journal_bytes}});
  }
  std::cout << "reindexed " << dir << ": " << stats->events << " event" << (stats->events == 1 ? "" : "s") << ", "
            << stats->journal_bytes << " bytes of journal\n";
  return kExitOk;
}

std::string FactLine(const StoredFact& fact) {
  return fact.fact.key + "\t" + JsonText(fact.fact.value) + "\t" + std::to_string(fact.fact.confidence).substr(0, 4) +
         "\t" + fact.valid_from + "\t" + fact.valid_to.value_or("-") + "\t" + fact.source;
}

bool CheckAsOf(const std::string& as_of) { return as_of.empty() || journal::IsRfc3339Utc(as_of); }

int RunFacts(const FactsArgs& args) {
  if (!CheckAsOf(args.as_of)) return Fail(Status::InvalidArgument("--as-of " + args.as_of, "must be UTC RFC 3339 (2026-12-02T16:40:00Z)"));
  Result<std::unique_ptr<CapsulePorts>> ports = OpenPorts(args.dir);
  if (!ports.ok()) return Fail(ports.status());
  std::optional<std::string> as_of;
  if (!args.as_of.empty()) as_of = args.as_of;
  Result<std::vector<StoredFact>> facts =
      args.all ? (*ports)->FactHistory(args.subject) : (*ports)->Recall(args.subject, {}, as_of);
  if (!facts.ok()) return Fail(facts.status());
  if (facts->empty()) {  // as why does: what was asked for is not so
    return Fail(Status::NotFound("facts " + args.subject, std::string("none believed ") +
                                                              (args.all ? "ever" : as_of ? "as of " + *as_of : "now")));
  }
  if (JsonOutput()) {
    Json out = Json::array();
    for (const StoredFact& fact : *facts) out.push_back(owned::FactToJson(fact));
    return PrintCanonical(out);
  }
  for (const StoredFact& fact : *facts) std::cout << FactLine(fact) << "\n";
  return kExitOk;
}

int RunRuns(const RunsArgs& args) {
  Result<std::unique_ptr<CapsulePorts>> ports = OpenPorts(args.dir);
  if (!ports.ok()) return Fail(ports.status());
  Result<std::vector<RunRecord>> runs = (*ports)->Runs(args.in_flight);
  if (!runs.ok()) return Fail(runs.status());
  if (JsonOutput()) {
    Json out = Json::array();
    for (const RunRecord& run : *runs) out.push_back(owned::RunToJson(run));
    return PrintCanonical(out);
  }
  for (const RunRecord& run : *runs) {
    std::cout << run.run_id << "\t" << run.framework << "\t" << run.status << "\t" << run.awaiting.value_or("-")
              << "\t" << run.steps << " steps\t" << run.thread_key << "\n";
  }
  return kExitOk;
}

int RunWhy(const WhyArgs& args) {
  if (!CheckAsOf(args.as_of)) return Fail(Status::InvalidArgument("--as-of " + args.as_of, "must be UTC RFC 3339 (2026-12-02T16:40:00Z)"));
  Result<std::unique_ptr<CapsulePorts>> ports = OpenPorts(args.dir);
  if (!ports.ok()) return Fail(ports.status());
  std::optional<std::string> as_of;
  if (!args.as_of.empty()) as_of = args.as_of;
  Result<std::vector<StoredFact>> facts = (*ports)->Recall(args.subject, {args.key}, as_of);
  if (!facts.ok()) return Fail(facts.status());
  if (facts->empty()) {
    return Fail(Status::NotFound("fact " + args.subject + "/" + args.key,
                                 "not believed " + (as_of ? "as of " + *as_of : std::string("now")) +
                                     " (see capsule facts --all)"));
  }
  const StoredFact& fact = facts->back();
  Result<SourceEvent> source = (*ports)->Source(fact.source);
  if (!source.ok()) return Fail(source.status());
  if (JsonOutput()) return PrintCanonical({{"fact", owned::FactToJson(fact)}, {"source", owned::SourceToJson(*source)}});
  std::cout << "fact " << fact.fact.subject << "/" << fact.fact.key << " = " << JsonText(fact.fact.value)
            << " (confidence " << fact.fact.confidence << "), valid from " << fact.valid_from << ", remembered by "
            << fact.id << "\n";
  if (!source->found) {
    std::cout << "source " << fact.source << ": not an event of the journal\n";
  } else {
    std::cout << "source " << source->id << ": " << source->type << " at " << source->ts << " on " << source->machine
              << ", conversation " << source->conversation << "\n";
    if (source->message) std::cout << "  " << source->message->role << ": " << source->message->content << "\n";
  }
  return kExitOk;
}

}  // namespace

void RegisterOwnedStateCommands(CLI::App& app, int* exit_code) {
  auto sql_args = std::make_shared<SqlArgs>();
  CLI::App* sql = app.add_subcommand("sql", "Run one read-only SQL query on the owned-state tables");
  sql->add_option("DIR", sql_args->dir, "Capsule folder or its mountpoint")->required();
  CLI::Option* query = sql->add_option(
      "QUERY", sql_args->query,
      "One SQL statement (a write is refused by SQLite); - or none: read it from standard input");
  sql->add_option("--timeout", sql_args->timeout, "Stop the query after SECONDS (exit 1); default: no limit")
      ->type_name("SECONDS")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            char* end = nullptr;
            double seconds = std::strtod(text.c_str(), &end);
            if (!text.empty() && end != nullptr && *end == '\0' && seconds > 0 && seconds < 1e9) return "";
            return "must be a positive number of seconds, got " + text;
          },
          ""));
  AddJsonFlag(sql, "Print a JSON array of objects, one per row (an error as JSON)");
  sql->callback([sql_args, query, exit_code] {
    sql_args->query_given = query->count() > 0;
    *exit_code = RunSql(*sql_args);
  });

  auto reindex_dir = std::make_shared<std::string>();
  CLI::App* reindex = app.add_subcommand("reindex", "Drop and rebuild the owned-state database from the journal");
  reindex->add_option("DIR", *reindex_dir, "Capsule folder or its mountpoint")->required();
  AddJsonFlag(reindex);
  AddProgressFlag(reindex);
  reindex->callback([reindex_dir, exit_code] { *exit_code = RunReindex(*reindex_dir); });

  auto facts_args = std::make_shared<FactsArgs>();
  CLI::App* facts = app.add_subcommand("facts", "The facts believed about SUBJECT (now, or --as-of a time)");
  facts->add_option("DIR", facts_args->dir, "Capsule folder or its mountpoint")->required();
  facts->add_option("SUBJECT", facts_args->subject, "The subject, e.g. user")->required();
  facts->add_option("--as-of", facts_args->as_of, "UTC RFC 3339 time (default: now)");
  facts->add_flag("--all", facts_args->all, "Every fact ever remembered about SUBJECT, expired ones too");
  AddJsonFlag(facts);
  facts->callback([facts_args, exit_code] { *exit_code = RunFacts(*facts_args); });

  auto runs_args = std::make_shared<RunsArgs>();
  CLI::App* runs = app.add_subcommand("runs", "The runs the projection keeps; --in-flight: those not closed");
  runs->add_option("DIR", runs_args->dir, "Capsule folder or its mountpoint")->required();
  runs->add_flag("--in-flight", runs_args->in_flight, "Only runs not closed (running or awaiting)");
  AddJsonFlag(runs);
  runs->callback([runs_args, exit_code] { *exit_code = RunRuns(*runs_args); });

  auto why_args = std::make_shared<WhyArgs>();
  CLI::App* why = app.add_subcommand("why", "Why the agent believes SUBJECT/KEY: the fact and its source event");
  why->add_option("DIR", why_args->dir, "Capsule folder or its mountpoint")->required();
  why->add_option("SUBJECT", why_args->subject, "The subject")->required();
  why->add_option("KEY", why_args->key, "The key")->required();
  why->add_option("--as-of", why_args->as_of, "UTC RFC 3339 time (default: now)");
  AddJsonFlag(why);
  why->callback([why_args, exit_code] { *exit_code = RunWhy(*why_args); });
}

}  // namespace capsule::cli
