#include "journal/owned/owned_test_util.h"

#include <ctime>
#include <utility>
#include <vector>

#include "journal/owned/sqlite.h"

namespace capsule::owned::testing {

namespace {

// An FTS5 index's words as (term, row, column, offset), whatever segments its b-tree holds
// (they depend on how many transactions wrote it, not on what it says). Read through a
// temporary fts5vocab table on a connection of its own (the main database is not written).
Result<std::string> DumpFtsInstances(const std::string& path, const std::string& table) {
  CAPSULE_ASSIGN_OR_RETURN(Database db, Database::Open(path, Database::Mode::kReadWrite));
  CAPSULE_RETURN_IF_ERROR(db.Execute("CREATE VIRTUAL TABLE temp.vocab USING fts5vocab(main, " + table + ", 'instance')"));
  CAPSULE_ASSIGN_OR_RETURN(Statement rows, db.Prepare("SELECT term, doc, col, offset FROM temp.vocab ORDER BY 1, 2, 3, 4"));
  std::string out = "== " + table + " (instances)\n";
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
    if (!row) break;
    out += rows.ColumnText(0) + "|" + rows.ColumnText(1) + "|" + rows.ColumnText(2) + "|" + rows.ColumnText(3) + "\n";
  }
  return out;
}

}  // namespace

Result<std::string> DumpDatabase(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(Database db, Database::Open(path, Database::Mode::kReadOnly));
  CAPSULE_ASSIGN_OR_RETURN(Statement tables,
                           db.Prepare("SELECT name, sql LIKE 'CREATE VIRTUAL TABLE % USING fts5%' FROM sqlite_master "
                                      "WHERE type = 'table' ORDER BY name"));
  std::vector<std::string> names, fts;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, tables.Step());
    if (!row) break;
    names.push_back(tables.ColumnText(0));
    if (tables.ColumnInt(1)) fts.push_back(tables.ColumnText(0));
  }
  std::string out;
  for (const std::string& table : fts) {
    CAPSULE_ASSIGN_OR_RETURN(std::string instances, DumpFtsInstances(path, table));
    out += instances;
  }
  for (const std::string& name : names) {
    bool segments = false;  // an FTS5 index's b-tree: dumped above by what it holds
    for (const std::string& table : fts) segments = segments || name == table + "_data" || name == table + "_idx";
    if (segments) continue;
    CAPSULE_ASSIGN_OR_RETURN(Statement probe, db.Prepare("SELECT * FROM " + name + " LIMIT 0"));
    std::string order;
    for (int c = 1; c <= probe.ColumnCount(); ++c) order += (c > 1 ? "," : "") + std::to_string(c);
    CAPSULE_ASSIGN_OR_RETURN(Statement rows, db.Prepare("SELECT * FROM " + name + " ORDER BY " + order));
    out += "== " + name + "\n";
    for (;;) {
      CAPSULE_ASSIGN_OR_RETURN(bool row, rows.Step());
      if (!row) break;
      for (int c = 0; c < rows.ColumnCount(); ++c) {
        out += (c ? "|" : "") + (rows.IsNull(c) ? std::string("NULL") : rows.ColumnText(c));
      }
      out += "\n";
    }
  }
  return out;
}

std::string TimeAt(int64_t seconds) {
  std::time_t t = static_cast<std::time_t>(1796083200 + seconds);  // 2026-12-01T00:00:00Z
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buffer;
}

journal::JournalOptions SteppingClock(std::shared_ptr<int64_t> clock, int64_t step) {
  journal::JournalOptions options;
  options.sync = false;
  options.now = [clock, step] { return TimeAt(std::exchange(*clock, *clock + step)); };
  return options;
}

}  // namespace capsule::owned::testing
