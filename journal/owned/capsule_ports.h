// The ports (ports.h) over one capsule: writes are journal events appended through
// journal::Journal (so this machine must hold the capsule), reads are queries on the
// owned-state database after it caught up with the journal. Also the questions the command
// line asks: a subject's facts over time, why a fact is believed, the runs in flight.
//
// Thread-safety: one thread at a time.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "journal/journal.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/ports.h"

namespace capsule::owned {

// The event a fact came from, as far as the journal tells.
struct SourceEvent {
  std::string id;
  bool found = false;  // false: the id names no event of the journal
  std::string type, ts, machine, conversation;
  std::optional<Message> message;  // when the source is a message
};

// One conversation as the projection keeps it.
struct ConversationSummary {
  std::string id;
  int64_t messages = 0, tokens = 0;
  std::string started_at, last_at;
};

class CapsulePorts final : public HistoryPort, public MemoryPort, public RunPort {
 public:
  // Reading needs nothing held; the first write opens the journal for writing (held here).
  static Result<std::unique_ptr<CapsulePorts>> Open(const std::string& capsule_dir,
                                                    journal::JournalOptions options = {});

  Result<std::vector<Message>> Load(const std::string& conversation) override;
  Result<std::vector<Message>> LoadPage(const std::string& conversation, int64_t limit,
                                        std::optional<int64_t> before_seq = std::nullopt) override;
  Result<Message> Append(const Message& message) override;

  Result<std::vector<StoredFact>> Recall(const std::string& subject, const std::vector<std::string>& keys,
                                         const std::optional<std::string>& as_of = std::nullopt) override;
  Result<StoredFact> Remember(const Fact& fact, const Provenance& provenance) override;
  Status Expire(const std::string& subject, const std::string& key, const Provenance& provenance) override;

  Result<RunRecord> OpenRun(const std::string& run_id, const std::string& framework, const std::string& thread_key,
                            const std::string& conversation = "main") override;
  Result<RunRecord> MarkAwaiting(const std::string& run_id, const std::string& awaiting) override;
  Result<RunRecord> CloseRun(const std::string& run_id, const std::string& status,
                             std::optional<double> cost = std::nullopt) override;

  // Every fact ever remembered about `subject` (valid or ended), oldest first.
  Result<std::vector<StoredFact>> FactHistory(const std::string& subject);
  // The event `event_id` (NotFound flag when the journal lacks it).
  Result<SourceEvent> Source(const std::string& event_id);
  Result<std::optional<RunRecord>> GetRun(const std::string& run_id);
  // Runs not closed (in flight), or every run the projection keeps.
  Result<std::vector<RunRecord>> Runs(bool in_flight_only);
  // Every conversation, by id.
  Result<std::vector<ConversationSummary>> Conversations();
  // The capsule folder these ports serve.
  const std::string& capsule_dir() const { return state_.capsule_dir(); }

 private:
  CapsulePorts(OwnedState state, journal::JournalOptions options)
      : state_(std::move(state)), options_(std::move(options)) {}
  Result<journal::Event> AppendEvent(const std::string& type, const Json& data);
  Result<RunRecord> RunOrFail(const std::string& run_id);

  OwnedState state_;
  journal::JournalOptions options_;
  std::optional<journal::Journal> journal_;  // opened on the first write
};

}  // namespace capsule::owned
