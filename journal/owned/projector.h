// The projection of the journal into the owned-state tables: one event at a time, in journal
// order, so the database is a function of the journal's events in their order. Rebuilding
// from the first line and following appends line by line give the same rows, because both
// feed the same events through Apply in the same order; nothing here looks at the wall clock
// or at where one batch ends (see Settings for retention's clock).
//
// What each event type becomes is documented in man/capsule.5, "OWNED STATE".
//
// Thread-safety: one Projector per Database, used by one thread, inside a transaction the
// caller holds.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "capsule/base/status.h"
#include "journal/check.h"
#include "journal/event.h"
#include "journal/owned/search_index.h"
#include "journal/owned/sqlite.h"

namespace capsule::owned {

// Tool results longer than this are trimmed in `messages` to their first kTrimPrefixBytes,
// with the full body stored once in `blobs`.
inline constexpr size_t kTrimThresholdBytes = 4096;
inline constexpr size_t kTrimPrefixBytes = 1024;

struct Settings {
  // Closed runs whose closed_at is this many days older than the latest ts in the journal
  // leave agent_runs (never the journal). 0 keeps them all. The clock is the journal's own
  // latest ts, not the wall clock, so the projection stays a function of the journal.
  int64_t closed_runs_max_age_days = 30;

  // Read from .capsule/owned.json ({"closed_runs_max_age_days": N}); defaults when absent.
  static Result<Settings> Load(const std::string& capsule_dir);
  std::string ToCanonicalJson() const;
};

// projection_state: how far the database has followed the journal.
struct ProjectionState {
  uint64_t journal_offset = 0;
  std::optional<std::string> last_event_id;
  uint64_t last_line_length = 0;
  uint64_t events = 0;
  std::string max_ts;
  std::string settings;
};

class Projector {
 public:
  // Loads projection_state and the machines' tails from `db` (an empty projection when the
  // state row is absent).
  static Result<std::unique_ptr<Projector>> Create(Database& db, const Settings& settings);
  ~Projector();

  const ProjectionState& state() const { return state_; }

  // Checks that `event` continues the projected journal (its order after the last event,
  // its machine's chain) and projects it. `line_length` is its line's length with the newline.
  // A break is Corruption naming the event (following answers it by rebuilding from the
  // first line, which reports the journal's own fault if it has one).
  Status Apply(const journal::Event& event, uint64_t line_length);

  // Writes what is cached in memory (conversations, runs, tails, projection_state). A
  // Projector may go on after Finish (its statements and caches stay) as long as nothing else
  // wrote the database meanwhile; see OwnedState.
  Status Finish();

 private:
  struct Conversation;
  struct Run;
  struct Statements;

  explicit Projector(Database& db, Settings settings);
  Status Load();
  Status ApplyMessage(const journal::Event& event, const std::string& conversation_id);
  Status ApplyFact(const journal::Event& event, const std::string& conversation_id);
  // search_text's row and embeddings' row (search_index.h) of a message or a remembered fact.
  Status IndexForSearch(const journal::Event& event);
  Status ApplyRun(const journal::Event& event, const std::string& run_id, const std::string& conversation_id);
  Result<Conversation*> GetConversation(const std::string& id, const std::string& ts);
  Result<Run*> GetRun(const std::string& id);
  Status FlushRuns();
  Status PruneClosedRuns();
  Status RecomputePruneDue();

  Database& db_;
  Settings settings_;
  ProjectionState state_;
  journal::JournalTail tails_;
  std::map<std::string, bool> dirty_machines_;
  std::optional<journal::Event> last_;  // clock, machine, seq of the last event
  double max_ts_seconds_ = 0;
  std::optional<double> prune_due_;     // when the oldest closed run falls out of retention
  std::unique_ptr<Statements> sql_;
  std::map<std::string, std::unique_ptr<Conversation>> conversations_;
  std::map<std::string, std::unique_ptr<Run>> runs_;
};

// Seconds since the epoch of a journal ts (UTC RFC 3339 with an optional fraction).
double TsToSeconds(const std::string& ts);

}  // namespace capsule::owned
