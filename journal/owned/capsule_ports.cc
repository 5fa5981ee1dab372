#include "journal/owned/capsule_ports.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdint>

#include "capsule/base/sha256.h"

namespace capsule::owned {

namespace {

constexpr char kMessageColumns[] =
    "m.message_id, m.conversation_id, m.seq, m.role, m.content, m.tool_call_id, m.tool_name, m.is_error, "
    "m.provider, m.model, m.run_id, m.tokens, m.ts, m.trimmed, b.body";
constexpr char kMessageFrom[] = " FROM messages m LEFT JOIN blobs b ON b.sha256 = m.body_sha256 ";

Message ReadMessage(const Statement& row) {
  Message message;
  message.id = row.ColumnText(0);
  message.conversation = row.ColumnText(1);
  message.seq = row.ColumnInt(2);
  message.role = row.ColumnText(3);
  message.content = row.ColumnText(4);
  message.tool_call_id = row.ColumnOptionalText(5);
  message.tool_name = row.ColumnOptionalText(6);
  if (!row.IsNull(7)) message.is_error = row.ColumnInt(7) != 0;
  message.provider = row.ColumnOptionalText(8);
  message.model = row.ColumnOptionalText(9);
  message.run_id = row.ColumnOptionalText(10);
  message.tokens = row.ColumnInt(11);
  message.ts = row.ColumnText(12);
  message.trimmed = row.ColumnInt(13) != 0;
  if (message.trimmed && !row.IsNull(14)) message.content = row.ColumnText(14);
  return message;
}

constexpr char kFactColumns[] =
    "fact_id, subject, key, value, confidence, conversation_id, source_message_id, valid_from, valid_to, ended_by";

Result<StoredFact> ReadFact(const Statement& row) {
  StoredFact stored;
  stored.id = row.ColumnText(0);
  stored.fact.subject = row.ColumnText(1);
  stored.fact.key = row.ColumnText(2);
  CAPSULE_ASSIGN_OR_RETURN(stored.fact.value, ParseJson(row.ColumnText(3), "fact value", Code::kCorruption));
  stored.fact.confidence = row.ColumnDouble(4);
  stored.fact.conversation = row.ColumnText(5);
  stored.source = row.ColumnText(6);
  stored.valid_from = row.ColumnText(7);
  stored.valid_to = row.ColumnOptionalText(8);
  stored.ended_by = row.ColumnOptionalText(9);
  return stored;
}

constexpr char kRunColumns[] =
    "run_id, framework, first_framework, thread_key, conversation_id, status, awaiting, steps, cost, resumes, "
    "opened_at, updated_at, closed_at";

RunRecord ReadRun(const Statement& row) {
  RunRecord run;
  run.run_id = row.ColumnText(0);
  run.framework = row.ColumnText(1);
  run.first_framework = row.ColumnText(2);
  run.thread_key = row.ColumnText(3);
  run.conversation = row.ColumnText(4);
  run.status = row.ColumnText(5);
  run.awaiting = row.ColumnOptionalText(6);
  run.steps = row.ColumnInt(7);
  run.cost = row.ColumnDouble(8);
  run.resumes = row.ColumnInt(9);
  run.opened_at = row.ColumnText(10);
  run.updated_at = row.ColumnText(11);
  run.closed_at = row.ColumnOptionalText(12);
  return run;
}

const char* TypeOfRole(const std::string& role) {
  if (role == "system") return "system";
  if (role == "user") return "user_message";
  if (role == "assistant") return "assistant_message";
  if (role == "tool_call") return "tool_call";
  if (role == "tool") return "tool_result";
  return nullptr;
}

Json WithConversation(Json data, const std::string& conversation) {
  if (!conversation.empty() && conversation != "main") data["conversation"] = conversation;
  return data;
}

}  // namespace

Result<std::unique_ptr<CapsulePorts>> CapsulePorts::Open(const std::string& capsule_dir,
                                                         journal::JournalOptions options) {
  CAPSULE_ASSIGN_OR_RETURN(OwnedState state, OwnedState::Open(capsule_dir));
  return std::unique_ptr<CapsulePorts>(new CapsulePorts(std::move(state), std::move(options)));
}

Result<journal::Event> CapsulePorts::AppendEvent(const std::string& type, const Json& data) {
  if (!journal_) {
    CAPSULE_ASSIGN_OR_RETURN(journal::Journal journal, journal::Journal::OpenForWrite(state_.capsule_dir(), options_));
    journal_.emplace(std::move(journal));
  }
  CAPSULE_ASSIGN_OR_RETURN(journal::Event event, journal_->Append(type, data));
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  return event;
}

Result<std::vector<Message>> CapsulePorts::Load(const std::string& conversation) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  CAPSULE_ASSIGN_OR_RETURN(Statement select, state_.db().Prepare(std::string("SELECT ") + kMessageColumns +
                                                                   kMessageFrom +
                                                                   "WHERE m.conversation_id = ? ORDER BY m.seq"));
  select.Bind(1, conversation);
  std::vector<Message> messages;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    messages.push_back(ReadMessage(select));
  }
  return messages;
}

Result<std::vector<Message>> CapsulePorts::LoadPage(const std::string& conversation, int64_t limit,
                                                    std::optional<int64_t> before_seq) {
  if (limit < 1) return Status::InvalidArgument("page of " + conversation, "limit must be at least 1");
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  CAPSULE_ASSIGN_OR_RETURN(Statement select,
                           state_.db().Prepare(std::string("SELECT ") + kMessageColumns + kMessageFrom +
                                               "WHERE m.conversation_id = ? AND m.seq < ? ORDER BY m.seq DESC LIMIT ?"));
  select.Bind(1, conversation).Bind(2, before_seq.value_or(INT64_MAX)).Bind(3, limit);
  std::vector<Message> messages;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    messages.push_back(ReadMessage(select));
  }
  std::reverse(messages.begin(), messages.end());
  return messages;
}

Result<Message> CapsulePorts::Append(const Message& message) {
  const char* type = TypeOfRole(message.role);
  if (type == nullptr) {
    return Status::InvalidArgument("message role " + message.role,
                                   "must be system, user, assistant, tool_call or tool");
  }
  Json data = Json::object();
  const std::string t = type;
  if (t == "tool_call") {
    CAPSULE_ASSIGN_OR_RETURN(Json arguments, ParseJson(message.content, "tool_call content (its arguments)"));
    data = {{"call_id", message.tool_call_id.value_or("")}, {"name", message.tool_name.value_or("")},
            {"arguments", arguments}};
  } else if (t == "tool_result") {
    data = {{"call_id", message.tool_call_id.value_or("")},
            {"content", message.content},
            {"is_error", message.is_error.value_or(false)}};
  } else {
    data = {{"text", message.content}};
    if (t == "assistant_message") {
      data["provider"] = message.provider.value_or("");
      data["model"] = message.model.value_or("");
    }
  }
  if (message.run_id) data["run_id"] = *message.run_id;
  CAPSULE_ASSIGN_OR_RETURN(journal::Event event, AppendEvent(type, WithConversation(data, message.conversation)));
  CAPSULE_ASSIGN_OR_RETURN(Statement select, state_.db().Prepare(std::string("SELECT ") + kMessageColumns +
                                                                   kMessageFrom + "WHERE m.message_id = ?"));
  select.Bind(1, event.id);
  CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return Status::Corruption(event.id, "appended, but the projection has no message for it");
  return ReadMessage(select);
}

Result<std::vector<StoredFact>> CapsulePorts::Recall(const std::string& subject, const std::vector<std::string>& keys,
                                                     const std::optional<std::string>& as_of) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  const std::string when = as_of.value_or(journal::UtcNowRfc3339());
  if (!journal::IsRfc3339Utc(when)) return Status::InvalidArgument("as of " + when, "must be UTC RFC 3339");
  CAPSULE_ASSIGN_OR_RETURN(
      Statement select,
      state_.db().Prepare(std::string("SELECT ") + kFactColumns +
                          " FROM agent_facts WHERE subject = ?1 AND julianday(valid_from) <= julianday(?2) AND "
                          "(valid_to IS NULL OR julianday(valid_to) > julianday(?2)) ORDER BY key, valid_from"));
  select.Bind(1, subject).Bind(2, when);
  std::vector<StoredFact> facts;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    CAPSULE_ASSIGN_OR_RETURN(StoredFact fact, ReadFact(select));
    bool wanted = keys.empty();
    for (const std::string& key : keys) wanted = wanted || key == fact.fact.key;
    if (wanted) facts.push_back(std::move(fact));
  }
  return facts;
}

Result<StoredFact> CapsulePorts::Remember(const Fact& fact, const Provenance& provenance) {
  if (provenance.source_event_id.empty()) {
    return Status::InvalidArgument("fact " + fact.subject + "/" + fact.key,
                                   "no provenance: a fact must name the event it came from");
  }
  CAPSULE_ASSIGN_OR_RETURN(SourceEvent source, Source(provenance.source_event_id));
  if (!source.found) {
    return Status::InvalidArgument("fact " + fact.subject + "/" + fact.key,
                                   "source " + provenance.source_event_id + " is not an event of the journal");
  }
  Json data = {{"subject", fact.subject},
               {"key", fact.key},
               {"value", fact.value},
               {"confidence", fact.confidence},
               {"source", provenance.source_event_id}};
  CAPSULE_ASSIGN_OR_RETURN(journal::Event event, AppendEvent("fact_remembered", WithConversation(data, fact.conversation)));
  CAPSULE_ASSIGN_OR_RETURN(Statement select, state_.db().Prepare(std::string("SELECT ") + kFactColumns +
                                                                   " FROM agent_facts WHERE fact_id = ?"));
  select.Bind(1, event.id);
  CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return Status::Corruption(event.id, "remembered, but the projection has no fact for it");
  return ReadFact(select);
}

Status CapsulePorts::Expire(const std::string& subject, const std::string& key, const Provenance& provenance) {
  if (provenance.source_event_id.empty()) {
    return Status::InvalidArgument("fact " + subject + "/" + key, "no provenance: say which event ends it");
  }
  CAPSULE_ASSIGN_OR_RETURN(SourceEvent source, Source(provenance.source_event_id));
  if (!source.found) {
    return Status::InvalidArgument("fact " + subject + "/" + key,
                                   "source " + provenance.source_event_id + " is not an event of the journal");
  }
  CAPSULE_ASSIGN_OR_RETURN(Statement valid, state_.db().Prepare("SELECT count(*) FROM agent_facts WHERE subject = ? "
                                                                "AND key = ? AND valid_to IS NULL"));
  valid.Bind(1, subject).Bind(2, key);
  CAPSULE_ASSIGN_OR_RETURN(bool row, valid.Step());
  if (!row || valid.ColumnInt(0) == 0) return Status::NotFound("fact " + subject + "/" + key, "no valid fact to expire");
  Json data = {{"subject", subject}, {"key", key}, {"source", provenance.source_event_id}};
  return AppendEvent("fact_expired", data).status();
}

Result<RunRecord> CapsulePorts::RunOrFail(const std::string& run_id) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<RunRecord> run, GetRun(run_id));
  if (!run) return Status::NotFound("run " + run_id, "not in the projection");
  return *run;
}

Result<RunRecord> CapsulePorts::OpenRun(const std::string& run_id, const std::string& framework,
                                        const std::string& thread_key, const std::string& conversation) {
  Json data = {{"run_id", run_id}, {"framework", framework}, {"thread_key", thread_key}};
  CAPSULE_RETURN_IF_ERROR(AppendEvent("run_opened", WithConversation(data, conversation)).status());
  return RunOrFail(run_id);
}

Result<RunRecord> CapsulePorts::MarkAwaiting(const std::string& run_id, const std::string& awaiting) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<RunRecord> run, GetRun(run_id));
  if (!run) return Status::NotFound("run " + run_id, "never opened");
  CAPSULE_RETURN_IF_ERROR(AppendEvent("run_awaiting", {{"run_id", run_id}, {"awaiting", awaiting}}).status());
  return RunOrFail(run_id);
}

Result<RunRecord> CapsulePorts::CloseRun(const std::string& run_id, const std::string& status,
                                         std::optional<double> cost) {
  CAPSULE_ASSIGN_OR_RETURN(std::optional<RunRecord> run, GetRun(run_id));
  if (!run) return Status::NotFound("run " + run_id, "never opened");
  Json data = {{"run_id", run_id}, {"status", status}};
  if (cost) data["cost"] = *cost;
  CAPSULE_RETURN_IF_ERROR(AppendEvent("run_closed", data).status());
  CAPSULE_ASSIGN_OR_RETURN(std::optional<RunRecord> closed, GetRun(run_id));
  if (!closed) {  // closed long ago by the journal's clock: retention already let it go
    RunRecord gone = *run;
    gone.status = status;
    return gone;
  }
  return *closed;
}

Result<std::vector<StoredFact>> CapsulePorts::FactHistory(const std::string& subject) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  CAPSULE_ASSIGN_OR_RETURN(
      Statement select,
      state_.db().Prepare(std::string("SELECT ") + kFactColumns +
                          " FROM agent_facts WHERE subject = ? "
                          "ORDER BY (SELECT position FROM journal_events WHERE event_id = fact_id)"));
  select.Bind(1, subject);
  std::vector<StoredFact> facts;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    CAPSULE_ASSIGN_OR_RETURN(StoredFact fact, ReadFact(select));
    facts.push_back(std::move(fact));
  }
  return facts;
}

Result<SourceEvent> CapsulePorts::Source(const std::string& event_id) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  SourceEvent source;
  source.id = event_id;
  CAPSULE_ASSIGN_OR_RETURN(Statement event, state_.db().Prepare("SELECT type, ts, machine, conversation_id FROM "
                                                                "journal_events WHERE event_id = ?"));
  event.Bind(1, event_id);
  CAPSULE_ASSIGN_OR_RETURN(bool found, event.Step());
  if (!found) return source;
  source.found = true;
  source.type = event.ColumnText(0);
  source.ts = event.ColumnText(1);
  source.machine = event.ColumnText(2);
  source.conversation = event.ColumnText(3);
  CAPSULE_ASSIGN_OR_RETURN(Statement message, state_.db().Prepare(std::string("SELECT ") + kMessageColumns +
                                                                    kMessageFrom + "WHERE m.message_id = ?"));
  message.Bind(1, event_id);
  CAPSULE_ASSIGN_OR_RETURN(bool is_message, message.Step());
  if (is_message) source.message = ReadMessage(message);
  return source;
}

Result<std::optional<RunRecord>> CapsulePorts::GetRun(const std::string& run_id) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  CAPSULE_ASSIGN_OR_RETURN(Statement select, state_.db().Prepare(std::string("SELECT ") + kRunColumns +
                                                                   " FROM agent_runs WHERE run_id = ?"));
  select.Bind(1, run_id);
  CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
  if (!row) return std::optional<RunRecord>();
  return std::optional<RunRecord>(ReadRun(select));
}

Result<std::vector<RunRecord>> CapsulePorts::Runs(bool in_flight_only) {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  std::string sql = std::string("SELECT ") + kRunColumns + " FROM agent_runs" +
                    (in_flight_only ? " WHERE closed_at IS NULL" : "") + " ORDER BY opened_at, run_id";
  CAPSULE_ASSIGN_OR_RETURN(Statement select, state_.db().Prepare(sql));
  std::vector<RunRecord> runs;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    runs.push_back(ReadRun(select));
  }
  return runs;
}

Result<std::vector<ConversationSummary>> CapsulePorts::Conversations() {
  CAPSULE_RETURN_IF_ERROR(state_.CatchUp().status());
  CAPSULE_ASSIGN_OR_RETURN(Statement select,
                           state_.db().Prepare("SELECT conversation_id, message_count, token_count, started_at, last_at "
                                               "FROM conversations ORDER BY conversation_id"));
  std::vector<ConversationSummary> conversations;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
    if (!row) break;
    conversations.push_back({select.ColumnText(0), select.ColumnInt(1), select.ColumnInt(2), select.ColumnText(3),
                             select.ColumnText(4)});
  }
  return conversations;
}

}  // namespace capsule::owned
