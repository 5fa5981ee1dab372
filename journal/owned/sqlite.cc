#include "journal/owned/sqlite.h"

#include <sqlite3.h>

#include <cctype>

namespace capsule::owned {

namespace {

// SQLite's refusals of a write on a read-only connection, a full disk or a corrupt file keep
// their own code: the caller decides (a corrupt cache is rebuilt, a read-only one is not).
Code CodeOf(int rc) {
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB: return Code::kCorruption;
    case SQLITE_READONLY:
    case SQLITE_AUTH:
    case SQLITE_PERM: return Code::kPermissionDenied;
    case SQLITE_CANTOPEN:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return Code::kIOError;
    default: return Code::kInvalidArgument;
  }
}

bool OnlyBlanks(std::string_view text) {
  for (char c : text) {
    if (!std::isspace(static_cast<unsigned char>(c)) && c != ';') return false;
  }
  return true;
}

}  // namespace

void Database::Closer::operator()(sqlite3* db) const { sqlite3_close_v2(db); }
void Statement::Finalizer::operator()(sqlite3_stmt* stmt) const { sqlite3_finalize(stmt); }

Database::~Database() = default;

Result<Database> Database::Open(const std::string& path, Mode mode, std::string name) {
  if (name.empty()) name = path;
  int flags = SQLITE_OPEN_NOMUTEX;
  switch (mode) {
    case Mode::kReadWrite: flags |= SQLITE_OPEN_READWRITE; break;
    case Mode::kCreate: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE; break;
    case Mode::kReadOnly: flags |= SQLITE_OPEN_READONLY; break;
  }
  sqlite3* raw = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &raw, flags, nullptr);
  Database db(raw, name);
  if (rc != SQLITE_OK) {
    if (raw == nullptr) return Status::IOError(name, "cannot open: out of memory");
    return db.Error("open", rc);
  }
  sqlite3_extended_result_codes(raw, 1);
  sqlite3_busy_timeout(raw, 10000);
  if (mode == Mode::kReadOnly) {
    CAPSULE_RETURN_IF_ERROR(db.Execute("PRAGMA query_only = 1"));
    // No other file either: ATTACH and VACUUM INTO would open (and create) one.
    sqlite3_limit(raw, SQLITE_LIMIT_ATTACHED, 0);
  }
  return db;
}

Status Database::Error(const std::string& what, int rc) const {
  std::string why = db_ ? sqlite3_errmsg(db_.get()) : sqlite3_errstr(rc);
  return Status::Make(CodeOf(rc), name_ + ": " + what, why);
}

Status Database::Execute(std::string_view sql) {
  std::string text(sql);
  char* message = nullptr;
  int rc = sqlite3_exec(db_.get(), text.c_str(), nullptr, nullptr, &message);
  std::string why = message ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  if (rc != SQLITE_OK) return Status::Make(CodeOf(rc), name_, why);
  return Status::Ok();
}

Result<Statement> Database::Prepare(std::string_view sql) {
  sqlite3_stmt* raw = nullptr;
  const char* tail = nullptr;
  int rc = sqlite3_prepare_v2(db_.get(), sql.data(), static_cast<int>(sql.size()), &raw, &tail);
  Statement statement(raw, db_.get(), name_);
  if (rc != SQLITE_OK) return Error("query", rc);
  if (raw == nullptr) return Status::InvalidArgument(name_ + ": query", "no statement given");
  size_t used = static_cast<size_t>(tail - sql.data());
  if (!OnlyBlanks(sql.substr(used))) {
    return Status::InvalidArgument(name_ + ": query", "one statement at a time (text follows the first)");
  }
  return statement;
}

Result<int64_t> Database::QueryInt(std::string_view sql) {
  CAPSULE_ASSIGN_OR_RETURN(Statement statement, Prepare(sql));
  CAPSULE_ASSIGN_OR_RETURN(bool row, statement.Step());
  if (!row) return Status::NotFound(name_, "no row for: " + std::string(sql));
  return statement.ColumnInt(0);
}

int64_t Database::Changes() const { return sqlite3_changes64(db_.get()); }

Status Statement::Error(int rc) const {
  std::string why = sqlite3_errmsg(conn_);
  if (why == "not an error") why = sqlite3_errstr(rc);
  return Status::Make(CodeOf(rc), name_, why);
}

// A failed bind is kept and reported by the next Step, so call sites can chain binds.
#define CAPSULE_SQLITE_BIND(call)                     \
  do {                                                \
    int rc_ = (call);                                 \
    if (rc_ != SQLITE_OK && pending_.ok()) pending_ = Error(rc_); \
  } while (0)

Statement& Statement::Bind(int index, int64_t value) {
  CAPSULE_SQLITE_BIND(sqlite3_bind_int64(stmt_.get(), index, value));
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  CAPSULE_SQLITE_BIND(sqlite3_bind_double(stmt_.get(), index, value));
  return *this;
}

Statement& Statement::Bind(int index, std::string_view text) {
  CAPSULE_SQLITE_BIND(
      sqlite3_bind_text64(stmt_.get(), index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8));
  return *this;
}

Statement& Statement::Bind(int index, const std::optional<std::string>& text) {
  return text ? Bind(index, *text) : BindNull(index);
}

Statement& Statement::BindBlob(int index, std::string_view bytes) {
  CAPSULE_SQLITE_BIND(sqlite3_bind_blob64(stmt_.get(), index, bytes.data(), bytes.size(), SQLITE_TRANSIENT));
  return *this;
}

Statement& Statement::BindNull(int index) {
  CAPSULE_SQLITE_BIND(sqlite3_bind_null(stmt_.get(), index));
  return *this;
}

#undef CAPSULE_SQLITE_BIND

Result<bool> Statement::Step() {
  if (!pending_.ok()) {
    Status failed = pending_;
    pending_ = Status::Ok();
    return failed;
  }
  int rc = sqlite3_step(stmt_.get());
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  Status failed = Error(rc);
  sqlite3_reset(stmt_.get());
  return failed;
}

Status Statement::Run() {
  Result<bool> stepped = Step();
  Reset();
  return stepped.status();
}

void Statement::Reset() {
  sqlite3_reset(stmt_.get());
  sqlite3_clear_bindings(stmt_.get());
}

int Statement::ColumnCount() const { return sqlite3_column_count(stmt_.get()); }
std::string Statement::ColumnName(int column) const { return sqlite3_column_name(stmt_.get(), column); }
int Statement::ColumnType(int column) const { return sqlite3_column_type(stmt_.get(), column); }
bool Statement::IsNull(int column) const { return ColumnType(column) == SQLITE_NULL; }
int64_t Statement::ColumnInt(int column) const { return sqlite3_column_int64(stmt_.get(), column); }
double Statement::ColumnDouble(int column) const { return sqlite3_column_double(stmt_.get(), column); }

std::string Statement::ColumnText(int column) const {
  const void* bytes = sqlite3_column_blob(stmt_.get(), column);
  int size = sqlite3_column_bytes(stmt_.get(), column);
  return bytes ? std::string(static_cast<const char*>(bytes), static_cast<size_t>(size)) : std::string();
}

std::optional<std::string> Statement::ColumnOptionalText(int column) const {
  if (IsNull(column)) return std::nullopt;
  return ColumnText(column);
}

Result<Transaction> Transaction::Begin(Database& db) {
  CAPSULE_RETURN_IF_ERROR(db.Execute("BEGIN IMMEDIATE"));
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (db_ != nullptr) (void)db_->Execute("ROLLBACK");
}

Status Transaction::Commit() {
  Database* db = db_;
  db_ = nullptr;
  return db->Execute("COMMIT");
}

}  // namespace capsule::owned
