#include "capsule/base/mutex.h"
#include "journal/owned/owned_state.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <utility>

#include "capsule/base/file_io.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/layout.h"
#include "journal/check.h"
#include "journal/event.h"
#include "journal/event_line.h"
#include "journal/owned/schema.h"

namespace capsule::owned {

namespace {

constexpr size_t kReadChunk = 8 << 20;

std::string JournalFile(const std::string& dir) { return JoinPath(dir, kJournalPath); }

// Holds flock(LOCK_EX) on .capsule/owned.lock: one writer of the database at a time.
class OwnedLock {
 public:
  static Result<OwnedLock> Acquire(const std::string& dir) {
    std::string path = JoinPath(dir, local::kOwnedLock);
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    while (::flock(fd.get(), LOCK_EX) != 0) {
      if (errno != EINTR) return Status::IOError(path + ": flock", errno);
    }
    return OwnedLock(std::move(fd));
  }

 private:
  explicit OwnedLock(UniqueFd fd) : fd_(std::move(fd)) {}
  UniqueFd fd_;  // closing it releases the lock
};

// The local folder, made when missing, and only in a capsule folder: a query of a folder that
// is not a capsule leaves nothing in it.
Status MakeLocalDir(const std::string& dir) {
  const std::string local = JoinPath(dir, kLocalDir);
  struct stat st {};
  if (::lstat(local.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status::Ok();
  CAPSULE_RETURN_IF_ERROR(CheckCapsuleFolder(dir));
  return MakeDirectories(local);
}

// Calls `each` with every complete line (without its newline) of the open journal from byte
// `from` up to `to`, and the line's length with its newline. A torn last line is left out.
Status ForEachLine(int fd, uint64_t from, uint64_t to, const std::string& path,
                   const std::function<Status(std::string_view, uint64_t)>& each) {
  std::string buffer;
  uint64_t offset = from;
  while (offset < to) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(kReadChunk, to - offset));
    size_t kept = buffer.size();
    buffer.resize(kept + want);
    CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd, buffer.data() + kept, want, static_cast<off_t>(offset), path));
    buffer.resize(kept + got);
    offset += got;
    if (got == 0) break;
    size_t start = 0;
    for (;;) {
      size_t end = buffer.find('\n', start);
      if (end == std::string::npos) break;
      CAPSULE_RETURN_IF_ERROR(each(std::string_view(buffer).substr(start, end - start), end - start + 1));
      start = end + 1;
    }
    buffer.erase(0, start);
  }
  return Status::Ok();
}

// Lines of the journal parsed on one thread and taken, in order, on another: a bounded queue
// of batches. Stop() makes the producer give up early (the consumer failed).
class ParsedLines {
 public:
  struct Batch {
    std::vector<journal::Event> events;
    std::vector<uint64_t> lengths;  // each line's length with its newline
    Status status;                  // the first fault; ends the stream
    bool last = false;
  };

  void Produce(int fd, uint64_t size, const std::string& path) {
    Batch batch;
    uint64_t line_number = 0;
    Status read = ForEachLine(fd, 0, size, path, [&](std::string_view line, uint64_t length) -> Status {
      if (stopped_.load()) return Status::Corruption(path, "stopped");
      ++line_number;
      // The fast reader first (event_line.h); the general one decides, and names the fault
      // of, any line it leaves.
      journal::EventLine fields;
      Result<journal::Event> event = journal::ReadEventLine(line, &fields)
                                         ? journal::ToEvent(fields, "journal line " + std::to_string(line_number))
                                         : journal::ParseEventLine(line, "journal line " + std::to_string(line_number));
      if (!event.ok()) return event.status();
      batch.events.push_back(std::move(*event));
      batch.lengths.push_back(length);
      if (batch.events.size() == kBatchEvents) Put(std::exchange(batch, Batch()));
      return Status::Ok();
    });
    batch.status = read;
    batch.last = true;
    Put(std::move(batch));
  }

  Batch Take() {
    std::unique_lock lock(mu_);
    ready_.wait(lock, [&]() REQUIRES(mu_) { return !queue_.empty(); });
    Batch batch = std::move(queue_.front());
    queue_.pop_front();
    room_.notify_one();
    return batch;
  }

  void Stop() {
    stopped_.store(true);
    std::lock_guard lock(mu_);
    queue_.clear();
    room_.notify_all();
  }

 private:
  static constexpr size_t kBatchEvents = 4096;
  static constexpr size_t kMaxBatches = 8;

  void Put(Batch batch) {
    std::unique_lock lock(mu_);
    room_.wait(lock, [&]() REQUIRES(mu_) { return queue_.size() < kMaxBatches || stopped_.load(); });
    if (stopped_.load()) return;
    queue_.push_back(std::move(batch));
    ready_.notify_one();
  }

  Mutex mu_;
  std::condition_variable ready_, room_;
  std::deque<Batch> queue_ GUARDED_BY(mu_);
  std::atomic<bool> stopped_{false};
};

Status SetFollowPragmas(Database& db) {
  // A checkpoint syncs the database: one per 8192 WAL pages (32 MiB) rather than SQLite's
  // 1000 keeps that cost off most appends.
  return db.Execute(
      "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA foreign_keys = OFF; "
      "PRAGMA wal_autocheckpoint = 8192");
}

enum class Followed { kDone, kNeedRebuild, kPastLimit };

// Projects the journal's lines after projection_state's offset, when the line that ends there
// is still the one projected last.
Result<Followed> FollowLocked(Database& db, const std::string& dir, const Settings& settings, uint64_t max_bytes,
                              std::unique_ptr<Projector>& projector, ProjectionStats* stats) {
  std::string path = JournalFile(dir);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::IOError(path, errno);
  const uint64_t size = static_cast<uint64_t>(st.st_size);

  // Where the projection stands, read without a transaction: only holders of the owned lock
  // write it, and this process holds it.
  ProjectionState state;
  {
    CAPSULE_ASSIGN_OR_RETURN(Statement select,
                             db.Prepare("SELECT journal_offset, last_event_id, last_line_length, events, settings "
                                        "FROM projection_state WHERE id = 1"));
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) return Followed::kNeedRebuild;
    state.journal_offset = static_cast<uint64_t>(select.ColumnInt(0));
    state.last_event_id = select.ColumnOptionalText(1);
    state.last_line_length = static_cast<uint64_t>(select.ColumnInt(2));
    state.events = static_cast<uint64_t>(select.ColumnInt(3));
    state.settings = select.ColumnText(4);
  }
  if (state.settings != settings.ToCanonicalJson()) return Followed::kNeedRebuild;
  if (state.journal_offset > size) return Followed::kNeedRebuild;
  if (size - state.journal_offset > max_bytes) return Followed::kPastLimit;
  if (state.journal_offset > 0) {
    // The line that ends at the offset must still be the last one projected.
    if (state.last_line_length == 0 || state.last_line_length > state.journal_offset || !state.last_event_id) {
      return Followed::kNeedRebuild;
    }
    std::string line(state.last_line_length, '\0');
    CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd.get(), line.data(), line.size(),
                                                 static_cast<off_t>(state.journal_offset - line.size()), path));
    if (got != line.size() || line.back() != '\n') return Followed::kNeedRebuild;
    line.pop_back();
    // The fast reader first (it checks the id against the content without building the
    // data's document, which may be megabytes); the general one decides any line it leaves.
    journal::EventLine fields;
    Result<journal::Event> last = journal::ReadEventLine(line, &fields) ? journal::HeaderOf(fields)
                                                                         : journal::ParseEventLine(line, "journal");
    if (!last.ok() || last->id != *state.last_event_id) return Followed::kNeedRebuild;
  }
  stats->journal_bytes = size;
  stats->events = state.events;
  if (state.journal_offset == size) return Followed::kDone;

  // The projector of the last catch-up goes on when the database is where it left it.
  if (projector && (projector->state().journal_offset != state.journal_offset ||
                    projector->state().events != state.events ||
                    projector->state().last_event_id != state.last_event_id)) {
    projector.reset();
  }
  CAPSULE_ASSIGN_OR_RETURN(Transaction transaction, Transaction::Begin(db));
  if (!projector) {
    CAPSULE_ASSIGN_OR_RETURN(projector, Projector::Create(db, settings));
  }
  bool broken = false;
  Status read = ForEachLine(fd.get(), state.journal_offset, size, path, [&](std::string_view line, uint64_t length) {
    Result<journal::Event> event =
        journal::ParseEventLine(line, "journal line " + std::to_string(projector->state().events + 1));
    Status applied = event.ok() ? projector->Apply(*event, length) : event.status();
    if (applied.code() == Code::kCorruption) {
      broken = true;  // rebuilding from the start reports the journal's fault, if it has one
      return Status::Corruption("journal", "stop");
    }
    return applied;
  });
  if (broken) return Followed::kNeedRebuild;
  CAPSULE_RETURN_IF_ERROR(read);
  CAPSULE_RETURN_IF_ERROR(projector->Finish());
  stats->events = projector->state().events;
  CAPSULE_RETURN_IF_ERROR(transaction.Commit());
  return Followed::kDone;
}

// Builds a fresh database from the journal's first line beside the old one, then renames it
// into place through the durable-write path.
Result<ProjectionStats> RebuildLocked(const std::string& dir, const Settings& settings, Progress* progress = nullptr) {
  const std::string db_path = OwnedDbPath(dir);
  const std::string journal_path = JournalFile(dir);
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd journal_fd, OpenFile(journal_path, O_RDONLY | O_CLOEXEC));
  struct stat st {};
  if (::fstat(journal_fd.get(), &st) != 0) return Status::IOError(journal_path, errno);

  // A rebuild killed midway leaves its temporary behind: debris, never in place. The lock
  // says no rebuild is running now, so any there is removed.
  {
    const std::string local = JoinPath(dir, kLocalDir);
    const std::string debris = std::string(kTempPrefix) + BaseName(local::kOwnedDb) + ".";
    CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> entries, ListTree(local));
    for (const TreeEntry& entry : entries) {
      if (entry.type == TreeEntry::Type::kFile && entry.path.rfind(debris, 0) == 0) {
        ::unlink(JoinPath(local, entry.path).c_str());
      }
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(db_path, 0644));
  ProjectionStats stats;
  stats.rebuilt = true;
  {
    // SQLite writes the temporary file through its own descriptor; with no rollback journal it
    // needs no other file beside it. AtomicFile::Commit then syncs and renames it.
    CAPSULE_ASSIGN_OR_RETURN(Database db, Database::Open("/proc/self/fd/" + std::to_string(file.fd()),
                                                         Database::Mode::kReadWrite, db_path));
    CAPSULE_RETURN_IF_ERROR(
        db.Execute(kBulkLoadPragmas));
    CAPSULE_RETURN_IF_ERROR(MigrateToCurrent(db));
    CAPSULE_RETURN_IF_ERROR(db.Execute("BEGIN"));
    CAPSULE_ASSIGN_OR_RETURN(std::unique_ptr<Projector> projector, Projector::Create(db, settings));
    // Parsing and checking lines (JSON, canonical form, SHA-256) runs on a second thread while
    // this one projects: the order of events is kept, batch by batch.
    ParsedLines parsed;
    if (progress != nullptr) progress->Begin("reindex", static_cast<uint64_t>(st.st_size), 0, "events");
    std::thread parser([&] { parsed.Produce(journal_fd.get(), static_cast<uint64_t>(st.st_size), journal_path); });
    Status applied = Status::Ok();
    for (;;) {
      ParsedLines::Batch batch = parsed.Take();
      uint64_t batch_bytes = 0;
      for (size_t i = 0; i < batch.events.size() && applied.ok(); ++i) {
        applied = projector->Apply(batch.events[i], batch.lengths[i]);
        batch_bytes += batch.lengths[i];
      }
      if (progress != nullptr) progress->Add(batch_bytes, batch.events.size());
      if (applied.ok()) applied = batch.status;
      if (!applied.ok() || batch.last) break;
    }
    parsed.Stop();
    parser.join();
    CAPSULE_RETURN_IF_ERROR(applied);
    CAPSULE_RETURN_IF_ERROR(projector->Finish());
    stats.events = projector->state().events;
    stats.journal_bytes = projector->state().journal_offset;
    CAPSULE_RETURN_IF_ERROR(db.Execute("COMMIT"));
  }
  // The old database's WAL belongs to it alone: left beside the new file, SQLite would take
  // it for the new one's. Writers hold the owned lock, so none is writing it now.
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    std::string stale = db_path + suffix;
    if (::unlink(stale.c_str()) != 0 && errno != ENOENT) return Status::IOError(stale, errno);
  }
  CAPSULE_RETURN_IF_ERROR(file.Commit());
  return stats;
}

}  // namespace

std::string OwnedDbPath(const std::string& capsule_dir) { return JoinPath(capsule_dir, local::kOwnedDb); }

OwnedState::OwnedState(OwnedState&&) noexcept = default;
OwnedState& OwnedState::operator=(OwnedState&&) noexcept = default;
OwnedState::~OwnedState() = default;

Result<OwnedState> OwnedState::Open(const std::string& capsule_dir, RebuildPolicy policy) {
  OwnedState state(capsule_dir, policy);
  CAPSULE_RETURN_IF_ERROR(state.CatchUp().status());
  return state;
}

Status OwnedState::Reopen() {
  projector_.reset();
  db_.reset();
  const std::string path = OwnedDbPath(dir_);
  CAPSULE_ASSIGN_OR_RETURN(Database db, Database::Open(path, Database::Mode::kReadWrite));
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::IOError(path, errno);
  inode_ = st.st_ino;
  CAPSULE_RETURN_IF_ERROR(SetFollowPragmas(db));
  db_ = std::make_unique<Database>(std::move(db));
  return Status::Ok();
}

Result<ProjectionStats> OwnedState::CatchUp() {
  CAPSULE_RETURN_IF_ERROR(MakeLocalDir(dir_));
  CAPSULE_ASSIGN_OR_RETURN(OwnedLock lock, OwnedLock::Acquire(dir_));
  CAPSULE_ASSIGN_OR_RETURN(Settings settings, Settings::Load(dir_));
  const std::string path = OwnedDbPath(dir_);
  // kDefer rebuilds only a journal within its limit (a rebuild reads the whole journal).
  bool defer = false;
  if (policy_ == RebuildPolicy::kDefer) {
    struct stat journal {};
    const std::string journal_path = JournalFile(dir_);
    if (::stat(journal_path.c_str(), &journal) != 0) return Status::IOError(journal_path, errno);
    defer = static_cast<uint64_t>(journal.st_size) > max_follow_bytes_;
  }
  ProjectionStats deferred;
  deferred.deferred = true;
  bool rebuilt = false;
  auto rebuild = [&]() -> Status {
    if (policy_ == RebuildPolicy::kNever) {
      return Status::FailedPrecondition(path, "needs a rebuild from the journal (left to the next query)");
    }
    projector_.reset();
    db_.reset();
    CAPSULE_RETURN_IF_ERROR(RebuildLocked(dir_, settings).status());
    rebuilt = true;
    return Reopen();
  };

  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT) return Status::IOError(path, errno);
    if (defer) return deferred;
    CAPSULE_RETURN_IF_ERROR(rebuild());
  } else if (db_ == nullptr || st.st_ino != inode_) {
    // Ours to open, or replaced by another process's rebuild since we opened it.
    Status opened = Reopen();
    if (!opened.ok()) {
      if (opened.code() != Code::kCorruption && opened.code() != Code::kIOError && opened.code() != Code::kNotFound) {
        return opened;
      }
      if (defer) return deferred;
      CAPSULE_RETURN_IF_ERROR(rebuild());
    }
  }
  Result<SchemaState> schema = CheckSchema(*db_);
  if (!schema.ok()) return schema.status();
  if (*schema == SchemaState::kRebuild && !rebuilt) {
    if (defer) return deferred;
    CAPSULE_RETURN_IF_ERROR(rebuild());
  }

  ProjectionStats stats;
  for (int attempt = 0; attempt < 2; ++attempt) {
    Result<Followed> followed = FollowLocked(*db_, dir_, settings, max_follow_bytes_, projector_, &stats);
    if (!followed.ok() || *followed != Followed::kDone) projector_.reset();
    if (!followed.ok()) {
      // A database SQLite finds corrupt is a cache: rebuild it once.
      if (followed.status().code() != Code::kCorruption || attempt > 0) return followed.status();
    } else if (*followed == Followed::kDone) {
      stats.rebuilt = rebuilt;
      return stats;
    } else if (*followed == Followed::kPastLimit) {
      return deferred;
    }
    if (attempt > 0) break;
    if (defer) return deferred;
    CAPSULE_RETURN_IF_ERROR(rebuild());
  }
  return Status::Corruption(path, "the database does not follow the journal even after a rebuild");
}

Result<ProjectionStats> OwnedState::Reindex(const std::string& capsule_dir, Progress* progress) {
  CAPSULE_RETURN_IF_ERROR(MakeLocalDir(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(OwnedLock lock, OwnedLock::Acquire(capsule_dir));
  CAPSULE_ASSIGN_OR_RETURN(Settings settings, Settings::Load(capsule_dir));
  // A database of a newer, incompatible schema is not this build's to drop.
  const std::string path = OwnedDbPath(capsule_dir);
  if (PathExists(path)) {
    Result<Database> existing = Database::Open(path, Database::Mode::kReadOnly);
    if (existing.ok()) CAPSULE_RETURN_IF_ERROR(CheckSchema(*existing).status());
  }
  return RebuildLocked(capsule_dir, settings, progress);
}

Status FollowJournal(const std::string& capsule_dir) { return OwnedState::Open(capsule_dir).status(); }

Result<ProjectionStats> FollowJournalWithin(const std::string& capsule_dir, uint64_t max_bytes) {
  OwnedState state(capsule_dir, RebuildPolicy::kDefer, max_bytes);
  return state.CatchUp();
}

Status JournalFollower::Follow() {
  if (!state_) {
    CAPSULE_ASSIGN_OR_RETURN(OwnedState opened, OwnedState::Open(dir_, RebuildPolicy::kNever));
    state_ = std::make_unique<OwnedState>(std::move(opened));  // Open followed to the end
    return Status::Ok();
  }
  return state_->CatchUp().status();
}

Result<Database> OpenForQuery(const std::string& capsule_dir) {
  CAPSULE_RETURN_IF_ERROR(OwnedState::Open(capsule_dir).status());
  return Database::Open(OwnedDbPath(capsule_dir), Database::Mode::kReadOnly);
}

}  // namespace capsule::owned
