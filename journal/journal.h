// The journal of one capsule, memory/timeline_events.jsonl: appending events, reading them in
// order, verifying them, and merging another copy's events in.
//
// Durability policy: Append writes the whole line with one write(2) on an O_APPEND descriptor,
// then fdatasync(2)s the file, and only then returns the event (acknowledges it). An
// acknowledged event survives a crash of the process or the machine. A crash before the
// fdatasync returns may leave the line whole, absent, or torn (a last line without its
// newline); a torn line was never acknowledged and is cut off (ftruncate to the last newline)
// the next time a writer opens the journal. JournalOptions::sync = false skips the fdatasync:
// for the benchmark only.
//
// Concurrency: every writer (Append, MergeFrom, the torn-tail repair) holds flock(2) on
// .capsule/journal.lock, so two processes appending at once lose no event and break no chain.
// An append holds it (and the holder record's lock) for its write(2) only, and fdatasyncs
// after letting go: writers appending at once share one flush (group commit: the kernel
// joins concurrent fdatasyncs of a file into one journal commit). Within one mount the
// kernel passes the journal's writes on one at a time, so there each append has its own.
// Readers take no lock: they see a prefix of the journal and ignore a torn last line.
//
// Appends do not reread the journal: a Journal keeps the journal, .capsule/journal.tail and
// .capsule/holder.lock open and remembers the journal's tail (each machine's last event, the
// largest clock) and size. An append then costs the two locks, a stat(2) of the holder
// record (read again only when it changed: capsule/format/holder_gate.h), a stat(2) of the
// journal and one write(2), then, unlocked, one fdatasync(2). The tail cache is rewritten
// (one pwrite(2)) on a Journal's first append, every kAppendsPerTailCache appends after, and
// when the Journal is destroyed. When the journal grew meanwhile (another writer), only the
// new lines are read and checked; when it was replaced (a merge) or shrank, it is opened
// again and its tail taken from .capsule/journal.tail, trusted only when the journal's inode
// matches and its last line lies where the cache says: the lines after it (appended since
// the cache was written) are read and checked, or, without a usable cache, the whole
// journal once from the start.
//
// Thread-safety: a Journal object is used by one thread at a time; separate objects (in one
// process or many) may append to the same capsule concurrently.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/base/status.h"
#include "capsule/format/holder_gate.h"
#include "journal/check.h"
#include "journal/event.h"

namespace capsule::journal {

struct JournalOptions {
  // fdatasync each append before acknowledging it. false is for the benchmark only.
  bool sync = true;
  // The time written into `ts` (UTC RFC 3339); injectable for tests.
  std::function<std::string()> now = UtcNowRfc3339;
  // How much of each journal MergeFrom(const OtherJournal&) reads at a time (3 blocks ahead).
  size_t merge_block_bytes = 4 << 20;
};

// Another copy's journal, open for reading, to be merged in by Journal::MergeFrom (which
// checks it as Journal::Read does, with the same faults).
struct OtherJournalText;
class OtherJournal {
 public:
  static Result<OtherJournal> Load(const std::string& capsule_dir);

 private:
  friend class Journal;
  explicit OtherJournal(std::shared_ptr<const OtherJournalText> text) : text_(std::move(text)) {}
  std::shared_ptr<const OtherJournalText> text_;
};

struct MergeResult {
  size_t added = 0;  // events of the other side this journal lacked
  size_t total = 0;  // events in the journal afterwards
};

class Journal {
 public:
  // Opens the journal of the capsule at `capsule_dir` for writing: refuses
  // (FailedPrecondition) unless this machine holds the capsule (active or frozen: each append
  // then needs it active), and cuts off a torn last line.
  static Result<Journal> OpenForWrite(const std::string& capsule_dir, JournalOptions options = {});
  // The same in the capsule folder held open (a mount's): the lock, the journal and its tail
  // cache are opened beneath it, never through a link (a link in their place is refused,
  // naming it). The path form opens the folder it names and does the same.
  static Result<Journal> OpenForWrite(DirFd folder, JournalOptions options = {});

  // Every event of the capsule's journal in order, after checking them all (Corruption
  // names the first bad event). Never needs the capsule held; a torn last line is ignored.
  static Result<std::vector<Event>> Read(const std::string& capsule_dir);
  // Read without keeping the events: ok, or the first fault.
  static Status Verify(const std::string& capsule_dir);

  // Appends one event of `type` with `data` (checked by CheckEventData); assigns machine,
  // seq, prev, clock, ts and id. Returns the event once it is durable (see the policy above).
  Result<Event> Append(const std::string& type, const Json& data);

  // One event to append: its type and data.
  struct NewEvent {
    std::string type;
    Json data;
  };
  // Appends every event of `events`, chained one after another, or none: each is checked
  // before any is written, then all go in one write(2) and one fdatasync. A refusal names the
  // event (by its position) and changes nothing.
  Result<std::vector<Event>> AppendAll(const std::vector<NewEvent>& events);

  // Adds every event of `events` (another copy's journal, in any order) that this journal
  // lacks: both sides are checked first; the union by id is written in (clock, machine, seq)
  // order through the durable-write path, and the manifest's entry for the journal is
  // refreshed. A conflicting event (same machine and seq, different id) refuses the merge
  // (Corruption naming both ids). Idempotent, commutative and associative.
  Result<MergeResult> MergeFrom(std::vector<Event> events);
  // The same for another copy's journal file, in one pass over each journal (like sort -m):
  // both are read a block at a time and checked, each on a thread of its own, as the merge
  // goes (merge_pipe.h: the lines both begin with byte for byte are checked once, for both),
  // so memory stays a few blocks whatever their size; lines are copied
  // byte for byte, and the merged journal's digest for the manifest is taken as it is
  // written. A fault is named as Journal::Read names it, ours first, a fault of the other
  // journal after its folder (the journals are then read whole to name it).
  Result<MergeResult> MergeFrom(const OtherJournal& other);

  Journal(Journal&&) = default;
  Journal& operator=(Journal&&) = delete;  // its HolderGate is not assignable
  // Leaves the tail cache up to date.
  ~Journal();

  const std::string& machine() const { return machine_; }
  const std::string& capsule_dir() const { return dir_; }

 private:
  Journal(DirFd folder, std::string machine, UniqueFd lock_fd, JournalOptions options)
      : dir_(folder.path()), folder_(std::move(folder)), machine_(std::move(machine)), lock_fd_(std::move(lock_fd)),
        options_(std::move(options)), gate_(dir_) {}

  // Under the lock: makes journal_fd_, size_, tail_ and last_line_ describe the journal at
  // its path now, with no torn last line.
  Status CatchUp();
  Status Reopen();
  // Under both locks: catches up, chains `events` onto the tail and writes them in one
  // write(2) (into `appended`). Returns the descriptor they went to, for the fdatasync that
  // AppendAll makes after letting go of the locks.
  Result<int> WriteLocked(const std::vector<NewEvent>& events, std::vector<Event>* appended);
  // Writes the tail cache from this Journal's view of the journal (under the lock).
  void SaveTailCache();

  static constexpr int kAppendsPerTailCache = 64;

  std::string dir_;
  DirFd folder_;  // the capsule folder, held: every file the Journal opens is beneath it
  std::string machine_;
  UniqueFd lock_fd_;  // .capsule/journal.lock, flock(2)ed by each write
  JournalOptions options_;
  HolderGate gate_;     // .capsule/holder.lock, shared-locked across each append
  UniqueFd journal_fd_;  // the journal as last seen (O_APPEND); invalid: open it again
  UniqueFd tail_fd_;     // .capsule/journal.tail
  uint64_t inode_ = 0, device_ = 0, size_ = 0;
  JournalTail tail_;
  std::string last_line_;  // the journal's last line, without its newline
  int appends_since_cache_ = 0;  // writes not yet in the tail cache
  bool cache_written_ = false;
};

}  // namespace capsule::journal
