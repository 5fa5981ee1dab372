// The three thin ports through which an agent framework reaches the state the product owns
// (history, durable facts, run shadows). A framework gets copies through them; the originals
// are journal events, projected into .capsule/owned.db. Swapping frameworks means pointing
// the new one at the same ports: nothing of the conversation lives in the framework.
//
// Thread-safety: implementations are used by one thread at a time.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"

namespace capsule::owned {

// One message of a conversation, as the history port gives and takes it.
struct Message {
  std::string id;                      // the journal event's id (assigned on append)
  std::string conversation = "main";
  int64_t seq = 0;                     // 1, 2, 3 ... within the conversation (assigned)
  std::string role;                    // system, user, assistant, tool_call, tool
  std::string content;                 // the full body; tool_call: its arguments as JSON
  std::optional<std::string> tool_call_id, tool_name;
  std::optional<bool> is_error;        // tool results
  std::optional<std::string> provider, model;  // assistant: required; others: pinned
  std::optional<std::string> run_id;   // the run it is a step of, if any
  int64_t tokens = 0;                  // assigned
  std::string ts;                      // assigned
  bool trimmed = false;                // the stored row holds a prefix; content here is whole
};

class HistoryPort {
 public:
  virtual ~HistoryPort() = default;
  // The conversation's messages in order, with whole bodies.
  virtual Result<std::vector<Message>> Load(const std::string& conversation) = 0;
  // One page of it, newest last: the `limit` latest messages whose seq is below `before_seq`
  // (every seq when absent). The page before this one ends below the first seq returned.
  virtual Result<std::vector<Message>> LoadPage(const std::string& conversation, int64_t limit,
                                                std::optional<int64_t> before_seq = std::nullopt) = 0;
  // Appends a message to the journal; returns it with id, seq, ts and tokens assigned.
  virtual Result<Message> Append(const Message& message) = 0;
};

struct Fact {
  std::string subject;
  std::string key;
  Json value;
  double confidence = 1.0;
  std::string conversation = "main";
};

// Where a fact came from: the id of a journal event (usually the message that said it).
struct Provenance {
  std::string source_event_id;
};

struct StoredFact {
  std::string id;  // the fact_remembered event's id
  Fact fact;
  std::string source;  // provenance: the source event's id
  std::string valid_from;
  std::optional<std::string> valid_to;  // set once expired or superseded
  std::optional<std::string> ended_by;  // the event that ended it
};

class MemoryPort {
 public:
  virtual ~MemoryPort() = default;
  // The facts about `subject` valid at `as_of` (UTC RFC 3339; now when absent), for `keys`
  // (every key when empty).
  virtual Result<std::vector<StoredFact>> Recall(const std::string& subject, const std::vector<std::string>& keys,
                                                 const std::optional<std::string>& as_of = std::nullopt) = 0;
  // Remembers a fact. Refused (InvalidArgument) without provenance, or when the source is not
  // an event of the journal. A valid fact of the same subject and key ends where this begins.
  virtual Result<StoredFact> Remember(const Fact& fact, const Provenance& provenance) = 0;
  // Ends the valid fact of `subject` and `key` (NotFound when none is valid); it stays
  // queryable as of before.
  virtual Status Expire(const std::string& subject, const std::string& key, const Provenance& provenance) = 0;
};

struct RunRecord {
  std::string run_id, framework, first_framework, thread_key, conversation, status;
  std::optional<std::string> awaiting;
  int64_t steps = 0, resumes = 0;
  double cost = 0;
  std::string opened_at, updated_at;
  std::optional<std::string> closed_at;
};

class RunPort {
 public:
  virtual ~RunPort() = default;
  // Opens a run, or resumes one (awaiting, or even closed) under `framework`.
  virtual Result<RunRecord> OpenRun(const std::string& run_id, const std::string& framework,
                                    const std::string& thread_key, const std::string& conversation = "main") = 0;
  virtual Result<RunRecord> MarkAwaiting(const std::string& run_id, const std::string& awaiting) = 0;
  // `cost`, when given, adds to the run's cost.
  virtual Result<RunRecord> CloseRun(const std::string& run_id, const std::string& status,
                                     std::optional<double> cost = std::nullopt) = 0;
};

}  // namespace capsule::owned
