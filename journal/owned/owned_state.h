// The owned-state database of a capsule, .capsule/owned.db: a projection of the journal that
// follows every append, and can always be dropped and rebuilt from the journal with the same
// rows (the journal is the truth; losing the database loses nothing).
//
// Following. projection_state records how far the database has projected: a byte offset into
// the journal and the id of the line that ends there. Catching up reads only the bytes after
// that offset when that line is still where it was (appends only added lines after it); when
// it is not (a merge inserted events before the end, or the journal was replaced), the
// database is rebuilt. A database that is missing, unreadable, of an older schema, or built
// with other settings is rebuilt too; one of a newer, incompatible schema is refused
// (schema.h). Catch-up and rebuild hold flock(2) on .capsule/owned.lock, so two processes
// never write the database at once.
//
// Rebuilding writes a fresh database beside the old one (an AtomicFile temporary in
// .capsule/), then fsyncs it and renames it into place: a crash mid-rebuild leaves the old
// database or the new one, never half of one. SQLite runs in WAL mode with synchronous=NORMAL
// for following: a power cut may lose the last transactions, which only means the next
// catch-up projects those lines again.
//
// Thread-safety: an OwnedState is used by one thread at a time; separate objects and
// processes may follow the same capsule concurrently.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "capsule/base/progress.h"
#include "capsule/base/status.h"
#include "journal/owned/projector.h"
#include "journal/owned/sqlite.h"

namespace capsule::owned {

// The path of the capsule's owned-state database.
std::string OwnedDbPath(const std::string& capsule_dir);

// How a rebuild writes its fresh database (and how the benchmark's bare insert writes its
// own): no rollback journal and no syncs (the file is synced whole before it is renamed into
// place), and a page cache large enough that a rebuild, which inserts into every table and
// index at once, event by event, does not page them through the file (SQLite takes the cache
// as it fills it, not up front).
inline constexpr char kBulkLoadPragmas[] =
    "PRAGMA journal_mode = OFF; PRAGMA synchronous = OFF; PRAGMA cache_size = -262144";

struct ProjectionStats {
  uint64_t events = 0;
  uint64_t journal_bytes = 0;
  bool rebuilt = false;  // this call rebuilt the database from the journal's first line
  bool deferred = false;  // this call left the catch-up to the next one (FollowJournalWithin)
};

// Whether a catch-up may rebuild the whole database. A writer on a latency-sensitive path
// (the mount's appends) follows only incrementally and leaves a rebuild to the next reader.
// kDefer: nothing that reads more of the journal than a limit (a catch-up past it, a rebuild
// of a larger journal); it is left to the next call.
enum class RebuildPolicy { kAllowed, kNever, kDefer };

class OwnedState {
 public:
  // Opens the capsule's database (building it when needed) and follows the journal to its end.
  // With RebuildPolicy::kNever, a database that needs a rebuild is FailedPrecondition instead.
  // A folder that is not a capsule (CheckCapsuleFolder) is refused before .capsule/ or its
  // lock is made; so is it by Reindex.
  static Result<OwnedState> Open(const std::string& capsule_dir, RebuildPolicy policy = RebuildPolicy::kAllowed);

  // Drops the database and rebuilds it from the journal. `progress` (phase "reindex"): the
  // journal's bytes and events projected, of its size.
  static Result<ProjectionStats> Reindex(const std::string& capsule_dir, Progress* progress = nullptr);

  // Projects what the journal gained since the last call (or rebuilds; see above).
  Result<ProjectionStats> CatchUp();

  // The read-write connection, current as of the last CatchUp.
  Database& db() { return *db_; }
  const std::string& capsule_dir() const { return dir_; }

  OwnedState(OwnedState&&) noexcept;
  OwnedState& operator=(OwnedState&&) noexcept;
  ~OwnedState();

 private:
  OwnedState(std::string dir, RebuildPolicy policy, uint64_t max_follow_bytes = UINT64_MAX)
      : dir_(std::move(dir)), policy_(policy), max_follow_bytes_(max_follow_bytes) {}
  Status Reopen();
  friend Result<ProjectionStats> FollowJournalWithin(const std::string& capsule_dir, uint64_t max_bytes);

  std::string dir_;
  RebuildPolicy policy_;
  uint64_t max_follow_bytes_;  // with kDefer: the most journal bytes one catch-up projects
  std::unique_ptr<Database> db_;
  // Kept between catch-ups (its prepared statements and cached rows) while projection_state
  // shows that no other process projected since; dropped on any failure. Declared after db_:
  // destroyed first.
  std::unique_ptr<Projector> projector_;
  ino_t inode_ = 0;  // of the file db_ has open: a rebuild elsewhere renames a new one in
};

// Catches the capsule's database up with its journal, best effort: for hooks after a journal
// append or merge, where a projection failure must never fail the append. Returns the status
// for the caller to report or ignore.
Status FollowJournal(const std::string& capsule_dir);

// FollowJournal for a command whose own work is done (an append): catches up only when that
// reads at most `max_bytes` of the journal (the bytes not yet projected, or the whole journal
// for a database to rebuild); otherwise it leaves the database as it is
// (ProjectionStats::deferred) and the catch-up to the next query. An append then never pays for projecting a large event (up to
// the journal's limit of 16 MiB, or larger in an older journal) or a whole journal.
Result<ProjectionStats> FollowJournalWithin(const std::string& capsule_dir, uint64_t max_bytes);

// FollowJournal for a long-lived writer (the mount): the database stays open between appends,
// and a catch-up never rebuilds it (RebuildPolicy::kNever: a rebuild is left to the next
// query, never done inside a write). Not thread-safe: the caller serialises Follow calls.
class JournalFollower {
 public:
  explicit JournalFollower(std::string capsule_dir) : dir_(std::move(capsule_dir)) {}
  Status Follow();

 private:
  std::string dir_;
  std::unique_ptr<OwnedState> state_;  // opened on the first Follow
};

// Catches up, then opens a read-only connection (SQLITE_OPEN_READONLY, PRAGMA query_only):
// a write through it is refused by SQLite.
Result<Database> OpenForQuery(const std::string& capsule_dir);

}  // namespace capsule::owned
