// Small RAII wrappers over SQLite for the owned-state database: a connection (Database), a
// prepared statement (Statement) and a transaction (Transaction). Every failure is a
// capsule::Status naming the database file and SQLite's own message; nothing else of the
// project sees a raw sqlite3 handle.
//
// Thread-safety: each object is used by one thread at a time (SQLite's default serialized
// mode would allow more, but nothing here needs it).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "capsule/base/status.h"

struct sqlite3;
struct sqlite3_stmt;

namespace capsule::owned {

class Statement;

class Database {
 public:
  enum class Mode {
    kReadWrite,  // an existing file, read and written
    kCreate,     // read and written, created when absent
    kReadOnly,   // SQLITE_OPEN_READONLY, PRAGMA query_only, no ATTACH: SQLite refuses every write
  };

  // `name` is how errors name the file (for example ".capsule/owned.db").
  static Result<Database> Open(const std::string& path, Mode mode, std::string name = "");

  Database(Database&&) noexcept = default;
  Database& operator=(Database&&) noexcept = default;
  ~Database();

  // Runs one or more statements that return no rows.
  Status Execute(std::string_view sql);
  // Prepares exactly one statement; text after it (other than blanks and a ';') is refused.
  Result<Statement> Prepare(std::string_view sql);
  // The value of the first column of the first row of a query (NotFound when no row).
  Result<int64_t> QueryInt(std::string_view sql);

  // An error status for the last failed call on this connection: "<name>: <what>: <sqlite says>".
  Status Error(const std::string& what, int rc) const;

  sqlite3* get() const { return db_.get(); }
  const std::string& name() const { return name_; }
  int64_t Changes() const;

 private:
  struct Closer {
    void operator()(sqlite3* db) const;
  };
  Database(sqlite3* db, std::string name) : db_(db), name_(std::move(name)) {}
  std::unique_ptr<sqlite3, Closer> db_;
  std::string name_;
};

// A prepared statement. Bind* take 1-based parameter indexes, Column* 0-based columns.
class Statement {
 public:
  Statement(Statement&&) noexcept = default;
  Statement& operator=(Statement&&) noexcept = default;

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view text);
  Statement& Bind(int index, const char* text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, const std::string& text) { return Bind(index, std::string_view(text)); }
  Statement& Bind(int index, const std::optional<std::string>& text);
  Statement& BindBlob(int index, std::string_view bytes);
  Statement& BindNull(int index);

  // true: a row is ready; false: done. Errors name the statement's purpose.
  Result<bool> Step();
  // Step for a statement that returns no rows, then Reset.
  Status Run();
  // Ready to run again with new bindings.
  void Reset();

  int ColumnCount() const;
  std::string ColumnName(int column) const;
  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB or SQLITE_NULL.
  int ColumnType(int column) const;
  bool IsNull(int column) const;
  int64_t ColumnInt(int column) const;
  double ColumnDouble(int column) const;
  std::string ColumnText(int column) const;  // also a blob's bytes; "" for NULL
  std::optional<std::string> ColumnOptionalText(int column) const;

 private:
  friend class Database;
  struct Finalizer {
    void operator()(sqlite3_stmt* stmt) const;
  };
  Statement(sqlite3_stmt* stmt, sqlite3* conn, std::string name)
      : stmt_(stmt), conn_(conn), name_(std::move(name)) {}
  Status Error(int rc) const;
  std::unique_ptr<sqlite3_stmt, Finalizer> stmt_;
  sqlite3* conn_;     // not owned: the Database outlives its statements
  std::string name_;  // the database's name, for errors
  Status pending_;  // the first failed Bind, reported by Step
};

// BEGIN IMMEDIATE on construction (through Begin), ROLLBACK on destruction unless committed.
class Transaction {
 public:
  static Result<Transaction> Begin(Database& db);
  Transaction(Transaction&& other) noexcept : db_(other.db_) { other.db_ = nullptr; }
  Transaction& operator=(Transaction&&) = delete;
  ~Transaction();
  Status Commit();

 private:
  explicit Transaction(Database* db) : db_(db) {}
  Database* db_;
};

}  // namespace capsule::owned
