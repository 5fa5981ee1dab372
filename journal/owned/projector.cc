#include "journal/owned/projector.h"

#include <sqlite3.h>

#include <cmath>
#include <cstdio>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"

namespace capsule::owned {

using journal::Event;

namespace {

constexpr double kSecondsPerDay = 86400.0;

// Days from 1970-01-01 to y-m-d (proleptic Gregorian), after Howard Hinnant's algorithm.
int64_t DaysFromCivil(int64_t y, unsigned m, unsigned d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const unsigned yoe = static_cast<unsigned>(y - era * 400);
  const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + static_cast<int64_t>(doe) - 719468;
}

// A UTF-8-safe prefix of at most `limit` bytes.
std::string Utf8Prefix(const std::string& text, size_t limit) {
  if (text.size() <= limit) return text;
  size_t cut = limit;
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return text.substr(0, cut);
}

std::optional<std::string> OptionalString(const Json& data, const char* key) {
  auto it = data.find(key);
  if (it == data.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

const char* RoleOf(const std::string& type) {
  if (type == "system") return "system";
  if (type == "user_message") return "user";
  if (type == "assistant_message") return "assistant";
  if (type == "tool_call") return "tool_call";
  if (type == "tool_result") return "tool";
  return nullptr;  // reasoning is scratch (and private to its provider): not a message
}

Status NotAContinuation(const Event& event, const std::string& why) {
  return Status::Corruption("journal: " + journal::DescribeEvent(event), why);
}

}  // namespace

double TsToSeconds(const std::string& ts) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0;
  double s = 0;
  if (std::sscanf(ts.c_str(), "%d-%d-%dT%d:%d:%lf", &y, &mo, &d, &h, &mi, &s) != 6) return 0;
  return static_cast<double>(DaysFromCivil(y, static_cast<unsigned>(mo), static_cast<unsigned>(d))) * kSecondsPerDay +
         h * 3600.0 + mi * 60.0 + s;
}

Result<Settings> Settings::Load(const std::string& capsule_dir) {
  Settings settings;
  std::string path = JoinPath(capsule_dir, local::kOwnedSettings);
  if (!PathExists(path)) return settings;
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, path));
  if (!json.is_object()) return Status::InvalidArgument(path, "must be a JSON object");
  auto age = json.find("closed_runs_max_age_days");
  if (age != json.end()) {
    if (!age->is_number_integer() || age->get<int64_t>() < 0) {
      return Status::InvalidArgument(path + ": closed_runs_max_age_days", "must be a whole number of days, 0 or more");
    }
    settings.closed_runs_max_age_days = age->get<int64_t>();
  }
  return settings;
}

std::string Settings::ToCanonicalJson() const {
  return Json({{"closed_runs_max_age_days", closed_runs_max_age_days}}).dump();
}

struct Projector::Conversation {
  std::string started_at, last_at;
  int64_t message_count = 0, token_count = 0;
  std::optional<std::string> provider, model;
  bool dirty = false;
};

struct Projector::Run {
  std::string framework, first_framework, thread_key, conversation_id, status = "running";
  std::optional<std::string> awaiting, closed_at;
  std::string opened_at, updated_at;
  int64_t steps = 0, resumes = 0;
  double cost = 0;
  bool dirty = false;
};

struct Projector::Statements {
  Statement insert_event, insert_message, insert_blob, end_fact, insert_fact, replace_conversation, replace_run,
      replace_machine, replace_state, insert_text, insert_embedding;
};

namespace {

Result<Statement> Prep(Database& db, const char* sql) { return db.Prepare(sql); }

}  // namespace

Projector::Projector(Database& db, Settings settings) : db_(db), settings_(std::move(settings)) {}
Projector::~Projector() = default;

Result<std::unique_ptr<Projector>> Projector::Create(Database& db, const Settings& settings) {
  std::unique_ptr<Projector> projector(new Projector(db, settings));
  CAPSULE_RETURN_IF_ERROR(projector->Load());
  return projector;
}

Status Projector::Load() {
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_event,
                           Prep(db_, "INSERT INTO journal_events (event_id, position, clock, machine, seq, ts, type, "
                                     "conversation_id, run_id) VALUES (?,?,?,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_message,
                           Prep(db_, "INSERT INTO messages (message_id, conversation_id, seq, role, ts, content, "
                                     "content_bytes, trimmed, body_sha256, tool_call_id, tool_name, is_error, provider, "
                                     "model, tokens, run_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_blob,
                           Prep(db_, "INSERT OR IGNORE INTO blobs (sha256, size, body) VALUES (?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement end_fact,
                           Prep(db_, "UPDATE agent_facts SET valid_to = ?, ended_by = ?, end_source = ? "
                                     "WHERE subject = ? AND key = ? AND valid_to IS NULL"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_fact,
                           Prep(db_, "INSERT INTO agent_facts (fact_id, subject, key, value, confidence, "
                                     "source_message_id, conversation_id, valid_from) VALUES (?,?,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement replace_conversation,
                           Prep(db_, "INSERT OR REPLACE INTO conversations (conversation_id, started_at, last_at, "
                                     "message_count, token_count, provider, model) VALUES (?,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement replace_run,
                           Prep(db_, "INSERT OR REPLACE INTO agent_runs (run_id, framework, first_framework, "
                                     "thread_key, conversation_id, status, awaiting, steps, cost, resumes, opened_at, "
                                     "updated_at, closed_at, closed_at_unix) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement replace_machine,
                           Prep(db_, "INSERT OR REPLACE INTO journal_machines (machine, seq, id, clock) VALUES (?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement replace_state,
                           Prep(db_, "INSERT OR REPLACE INTO projection_state (id, journal_offset, last_event_id, "
                                     "last_line_length, events, max_ts, settings) VALUES (1,?,?,?,?,?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_text, Prep(db_, "INSERT INTO search_text (rowid, text) VALUES (?,?)"));
  CAPSULE_ASSIGN_OR_RETURN(Statement insert_embedding,
                           Prep(db_, "INSERT INTO embeddings (position, model, dims, vector) VALUES (?,?,?,?)"));
  sql_.reset(new Statements{std::move(insert_event), std::move(insert_message), std::move(insert_blob),
                            std::move(end_fact), std::move(insert_fact), std::move(replace_conversation),
                            std::move(replace_run), std::move(replace_machine), std::move(replace_state),
                            std::move(insert_text), std::move(insert_embedding)});

  CAPSULE_ASSIGN_OR_RETURN(Statement state,
                           Prep(db_, "SELECT journal_offset, last_event_id, last_line_length, events, max_ts, settings "
                                     "FROM projection_state WHERE id = 1"));
  CAPSULE_ASSIGN_OR_RETURN(bool has_state, state.Step());
  if (has_state) {
    state_.journal_offset = static_cast<uint64_t>(state.ColumnInt(0));
    state_.last_event_id = state.ColumnOptionalText(1);
    state_.last_line_length = static_cast<uint64_t>(state.ColumnInt(2));
    state_.events = static_cast<uint64_t>(state.ColumnInt(3));
    state_.max_ts = state.ColumnText(4);
    state_.settings = state.ColumnText(5);
    if (!state_.max_ts.empty()) max_ts_seconds_ = TsToSeconds(state_.max_ts);
  } else {
    state_.settings = settings_.ToCanonicalJson();
  }

  CAPSULE_ASSIGN_OR_RETURN(Statement machines, Prep(db_, "SELECT machine, seq, id, clock FROM journal_machines"));
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(bool row, machines.Step());
    if (!row) break;
    journal::MachineTail& tail = tails_.machines[machines.ColumnText(0)];
    tail.seq = static_cast<uint64_t>(machines.ColumnInt(1));
    tail.id = machines.ColumnText(2);
    tail.clock = static_cast<uint64_t>(machines.ColumnInt(3));
    tails_.max_clock = std::max(tails_.max_clock, tail.clock);
  }
  if (state_.events > 0) {
    CAPSULE_ASSIGN_OR_RETURN(Statement last, Prep(db_, "SELECT clock, machine, seq FROM journal_events WHERE position = ?"));
    last.Bind(1, static_cast<int64_t>(state_.events));
    CAPSULE_ASSIGN_OR_RETURN(bool row, last.Step());
    if (!row) return Status::Corruption(db_.name(), "projection_state names an event journal_events lacks");
    Event event;
    event.clock = static_cast<uint64_t>(last.ColumnInt(0));
    event.machine = last.ColumnText(1);
    event.seq = static_cast<uint64_t>(last.ColumnInt(2));
    last_ = std::move(event);
  }
  return RecomputePruneDue();
}

Status Projector::Apply(const Event& event, uint64_t line_length) {
  // The same checks as journal/check.cc, one event at a time against the stored tails.
  if (last_ && !journal::EventOrderLess(*last_, event)) {
    return NotAContinuation(event, "out of order: not after " + journal::DescribeEvent(*last_) + " in (clock, machine, seq) order");
  }
  auto known = tails_.machines.find(event.machine);
  uint64_t last_seq = known == tails_.machines.end() ? 0 : known->second.seq;
  if (event.seq != last_seq + 1) return NotAContinuation(event, "seq does not follow seq " + std::to_string(last_seq));
  if (last_seq > 0 && (event.prev != known->second.id || event.clock <= known->second.clock)) {
    return NotAContinuation(event, "prev or clock does not follow seq " + std::to_string(last_seq));
  }
  if (last_seq == 0 && event.prev.has_value()) return NotAContinuation(event, "seq 1 must have prev null");
  tails_.Add(event);
  dirty_machines_[event.machine] = true;
  Event order;
  order.clock = event.clock;
  order.machine = event.machine;
  order.seq = event.seq;
  last_ = std::move(order);

  const std::string conversation_id = event.Conversation();
  const std::optional<std::string> run_id = OptionalString(event.data, "run_id");
  ++state_.events;
  state_.journal_offset += line_length;
  state_.last_event_id = event.id;
  state_.last_line_length = line_length;
  double seconds = TsToSeconds(event.ts);
  if (state_.max_ts.empty() || seconds > max_ts_seconds_) {
    state_.max_ts = event.ts;
    max_ts_seconds_ = seconds;
  }

  Statement& insert = sql_->insert_event;
  insert.Bind(1, event.id)
      .Bind(2, static_cast<int64_t>(state_.events))
      .Bind(3, static_cast<int64_t>(event.clock))
      .Bind(4, event.machine)
      .Bind(5, static_cast<int64_t>(event.seq))
      .Bind(6, event.ts)
      .Bind(7, event.type)
      .Bind(8, conversation_id)
      .Bind(9, run_id);
  CAPSULE_RETURN_IF_ERROR(insert.Run());

  // An event whose data does not pass this build's checks (another build's type, say) is
  // kept in journal_events only.
  if (journal::CheckEventData(event.type, event.data).ok()) {
    if (RoleOf(event.type) != nullptr) {
      CAPSULE_RETURN_IF_ERROR(ApplyMessage(event, conversation_id));
      CAPSULE_RETURN_IF_ERROR(IndexForSearch(event));
    } else if (event.type == "model_switch") {
      CAPSULE_ASSIGN_OR_RETURN(Conversation * conversation, GetConversation(conversation_id, event.ts));
      conversation->provider = event.data["provider"].get<std::string>();
      conversation->model = event.data["model"].get<std::string>();
      conversation->dirty = true;
    } else if (event.type == "fact_remembered" || event.type == "fact_expired") {
      CAPSULE_RETURN_IF_ERROR(ApplyFact(event, conversation_id));
      if (event.type == "fact_remembered") CAPSULE_RETURN_IF_ERROR(IndexForSearch(event));
    }
    if (run_id && !run_id->empty()) CAPSULE_RETURN_IF_ERROR(ApplyRun(event, *run_id, conversation_id));
  }

  if (settings_.closed_runs_max_age_days > 0 && prune_due_ && max_ts_seconds_ >= *prune_due_) {
    CAPSULE_RETURN_IF_ERROR(PruneClosedRuns());
  }
  return Status::Ok();
}

Result<Projector::Conversation*> Projector::GetConversation(const std::string& id, const std::string& ts) {
  auto it = conversations_.find(id);
  if (it != conversations_.end()) return it->second.get();
  auto conversation = std::make_unique<Conversation>();
  CAPSULE_ASSIGN_OR_RETURN(Statement select,
                           Prep(db_, "SELECT started_at, last_at, message_count, token_count, provider, model "
                                     "FROM conversations WHERE conversation_id = ?"));
  select.Bind(1, id);
  CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
  if (row) {
    conversation->started_at = select.ColumnText(0);
    conversation->last_at = select.ColumnText(1);
    conversation->message_count = select.ColumnInt(2);
    conversation->token_count = select.ColumnInt(3);
    conversation->provider = select.ColumnOptionalText(4);
    conversation->model = select.ColumnOptionalText(5);
  } else {
    conversation->started_at = conversation->last_at = ts;
    conversation->dirty = true;
  }
  Conversation* raw = conversation.get();
  conversations_.emplace(id, std::move(conversation));
  return raw;
}

Status Projector::ApplyMessage(const Event& event, const std::string& conversation_id) {
  CAPSULE_ASSIGN_OR_RETURN(Conversation * conversation, GetConversation(conversation_id, event.ts));
  const Json& data = event.data;
  std::string body;
  std::optional<std::string> call_id, tool_name;
  std::optional<int64_t> is_error;
  if (event.type == "tool_call") {
    CAPSULE_ASSIGN_OR_RETURN(body, CanonicalJson(data["arguments"], "tool_call arguments"));
    call_id = data["call_id"].get<std::string>();
    tool_name = data["name"].get<std::string>();
  } else if (event.type == "tool_result") {
    const Json& content = data["content"];
    if (content.is_string()) {
      body = content.get<std::string>();
    } else {
      CAPSULE_ASSIGN_OR_RETURN(body, CanonicalJson(content, "tool_result content"));
    }
    call_id = data["call_id"].get<std::string>();
    is_error = data["is_error"].get<bool>() ? 1 : 0;
  } else {
    body = data["text"].get<std::string>();
  }
  if (auto provider = OptionalString(data, "provider")) {
    conversation->provider = provider;
    conversation->model = OptionalString(data, "model");
  }
  int64_t tokens = static_cast<int64_t>((body.size() + 3) / 4);
  if (auto given = data.find("tokens"); given != data.end() && given->is_number_unsigned()) {
    tokens = given->get<int64_t>();
  }

  std::string content = body;
  std::optional<std::string> body_sha256;
  if (event.type == "tool_result" && body.size() > kTrimThresholdBytes) {
    content = Utf8Prefix(body, kTrimPrefixBytes);
    body_sha256 = Sha256Hex(body);
    Statement& blob = sql_->insert_blob;
    blob.Bind(1, *body_sha256).Bind(2, static_cast<int64_t>(body.size())).BindBlob(3, body);
    CAPSULE_RETURN_IF_ERROR(blob.Run());
  }

  ++conversation->message_count;
  conversation->token_count += tokens;
  conversation->last_at = event.ts;
  conversation->dirty = true;

  Statement& insert = sql_->insert_message;
  insert.Bind(1, event.id)
      .Bind(2, conversation_id)
      .Bind(3, conversation->message_count)
      .Bind(4, RoleOf(event.type))
      .Bind(5, event.ts)
      .Bind(6, content)
      .Bind(7, static_cast<int64_t>(body.size()))
      .Bind(8, static_cast<int64_t>(body_sha256 ? 1 : 0))
      .Bind(9, body_sha256)
      .Bind(10, call_id)
      .Bind(11, tool_name)
      .Bind(13, conversation->provider)
      .Bind(14, conversation->model)
      .Bind(15, tokens)
      .Bind(16, OptionalString(data, "run_id"));
  if (is_error) {
    insert.Bind(12, *is_error);
  } else {
    insert.BindNull(12);
  }
  return insert.Run();
}

Status Projector::ApplyFact(const Event& event, const std::string& conversation_id) {
  const Json& data = event.data;
  const std::string subject = data["subject"].get<std::string>();
  const std::string key = data["key"].get<std::string>();
  const std::string source = data["source"].get<std::string>();
  // A fact_remembered for a (subject, key) that has a valid fact ends that one: one value per
  // key is valid at a time, and a correction keeps the old value queryable as of before.
  Statement& end = sql_->end_fact;
  end.Bind(1, event.ts).Bind(2, event.id);
  if (event.type == "fact_expired") {
    end.Bind(3, source);
  } else {
    end.BindNull(3);
  }
  end.Bind(4, subject).Bind(5, key);
  CAPSULE_RETURN_IF_ERROR(end.Run());
  if (event.type == "fact_expired") return Status::Ok();

  CAPSULE_ASSIGN_OR_RETURN(std::string value, CanonicalJson(data["value"], "fact value"));
  Statement& insert = sql_->insert_fact;
  insert.Bind(1, event.id)
      .Bind(2, subject)
      .Bind(3, key)
      .Bind(4, value)
      .Bind(5, data["confidence"].get<double>())
      .Bind(6, source)
      .Bind(7, conversation_id)
      .Bind(8, event.ts);
  return insert.Run();
}

Status Projector::IndexForSearch(const Event& event) {
  const int64_t position = static_cast<int64_t>(state_.events);
  CAPSULE_ASSIGN_OR_RETURN(std::string text, SearchableText(event));
  CAPSULE_RETURN_IF_ERROR(sql_->insert_text.Bind(1, position).Bind(2, text).Run());
  std::optional<Embedding> embedding = EmbeddingOf(event.data);
  if (!embedding) return Status::Ok();
  std::string vector(reinterpret_cast<const char*>(embedding->vector.data()), embedding->vector.size() * sizeof(float));
  return sql_->insert_embedding.Bind(1, position)
      .Bind(2, embedding->model)
      .Bind(3, static_cast<int64_t>(embedding->vector.size()))
      .BindBlob(4, vector)
      .Run();
}

Result<Projector::Run*> Projector::GetRun(const std::string& id) {
  auto it = runs_.find(id);
  if (it != runs_.end()) return it->second.get();
  auto run = std::make_unique<Run>();
  CAPSULE_ASSIGN_OR_RETURN(Statement select,
                           Prep(db_, "SELECT framework, first_framework, thread_key, conversation_id, status, awaiting, "
                                     "steps, cost, resumes, opened_at, updated_at, closed_at FROM agent_runs "
                                     "WHERE run_id = ?"));
  select.Bind(1, id);
  CAPSULE_ASSIGN_OR_RETURN(bool row, select.Step());
  if (row) {
    run->framework = select.ColumnText(0);
    run->first_framework = select.ColumnText(1);
    run->thread_key = select.ColumnText(2);
    run->conversation_id = select.ColumnText(3);
    run->status = select.ColumnText(4);
    run->awaiting = select.ColumnOptionalText(5);
    run->steps = select.ColumnInt(6);
    run->cost = select.ColumnDouble(7);
    run->resumes = select.ColumnInt(8);
    run->opened_at = select.ColumnText(9);
    run->updated_at = select.ColumnText(10);
    run->closed_at = select.ColumnOptionalText(11);
  }
  Run* raw = run.get();
  runs_.emplace(id, std::move(run));
  return raw;
}

Status Projector::ApplyRun(const Event& event, const std::string& run_id, const std::string& conversation_id) {
  CAPSULE_ASSIGN_OR_RETURN(Run * run, GetRun(run_id));
  const Json& data = event.data;
  if (run->opened_at.empty()) {  // first heard of here (a run_opened, or a step seen before it)
    run->opened_at = event.ts;
    run->conversation_id = conversation_id;
  }
  ++run->steps;
  if (auto cost = data.find("cost"); cost != data.end() && cost->is_number()) run->cost += cost->get<double>();
  run->updated_at = event.ts;
  run->dirty = true;
  if (event.type == "run_opened") {
    // A run_opened of a known run is a resume, possibly by another framework.
    if (run->first_framework.empty()) {
      run->first_framework = data["framework"].get<std::string>();
    } else {
      ++run->resumes;
    }
    run->framework = data["framework"].get<std::string>();
    run->thread_key = data["thread_key"].get<std::string>();
    run->conversation_id = conversation_id;
    run->status = "running";
    run->awaiting.reset();
    run->closed_at.reset();
  } else if (event.type == "run_awaiting") {
    run->status = "awaiting";
    run->awaiting = data["awaiting"].get<std::string>();
  } else if (event.type == "run_closed") {
    run->status = data["status"].get<std::string>();
    run->awaiting.reset();
    run->closed_at = event.ts;
    if (settings_.closed_runs_max_age_days > 0) {
      double due = TsToSeconds(event.ts) + static_cast<double>(settings_.closed_runs_max_age_days) * kSecondsPerDay;
      if (!prune_due_ || due < *prune_due_) prune_due_ = due;
    }
  } else if (run->status == "awaiting") {
    run->status = "running";  // another event of the run: it resumed
    run->awaiting.reset();
  }
  return Status::Ok();
}

Status Projector::FlushRuns() {
  for (auto& [id, run] : runs_) {
    if (!run->dirty) continue;
    Statement& replace = sql_->replace_run;
    replace.Bind(1, id)
        .Bind(2, run->framework)
        .Bind(3, run->first_framework)
        .Bind(4, run->thread_key)
        .Bind(5, run->conversation_id)
        .Bind(6, run->status)
        .Bind(7, run->awaiting)
        .Bind(8, run->steps)
        .Bind(9, run->cost)
        .Bind(10, run->resumes)
        .Bind(11, run->opened_at)
        .Bind(12, run->updated_at)
        .Bind(13, run->closed_at);
    if (run->closed_at) {
      replace.Bind(14, TsToSeconds(*run->closed_at));
    } else {
      replace.BindNull(14);
    }
    CAPSULE_RETURN_IF_ERROR(replace.Run());
    run->dirty = false;
  }
  return Status::Ok();
}

Status Projector::PruneClosedRuns() {
  CAPSULE_RETURN_IF_ERROR(FlushRuns());
  runs_.clear();
  const double age = static_cast<double>(settings_.closed_runs_max_age_days) * kSecondsPerDay;
  CAPSULE_ASSIGN_OR_RETURN(Statement remove,
                           Prep(db_, "DELETE FROM agent_runs WHERE closed_at_unix IS NOT NULL AND closed_at_unix <= ?"));
  CAPSULE_RETURN_IF_ERROR(remove.Bind(1, max_ts_seconds_ - age).Run());
  return RecomputePruneDue();
}

Status Projector::RecomputePruneDue() {
  prune_due_.reset();
  if (settings_.closed_runs_max_age_days <= 0) return Status::Ok();
  const double age = static_cast<double>(settings_.closed_runs_max_age_days) * kSecondsPerDay;
  // The runs written so far (closed_at_unix is indexed), then those closed in this batch.
  CAPSULE_ASSIGN_OR_RETURN(Statement oldest, Prep(db_, "SELECT min(closed_at_unix) FROM agent_runs"));
  CAPSULE_ASSIGN_OR_RETURN(bool row, oldest.Step());
  if (row && !oldest.IsNull(0)) prune_due_ = oldest.ColumnDouble(0) + age;
  for (const auto& [id, run] : runs_) {
    if (!run->closed_at) continue;
    double due = TsToSeconds(*run->closed_at) + age;
    if (!prune_due_ || due < *prune_due_) prune_due_ = due;
  }
  return Status::Ok();
}

Status Projector::Finish() {
  for (auto& [id, conversation] : conversations_) {
    if (!conversation->dirty) continue;
    Statement& replace = sql_->replace_conversation;
    replace.Bind(1, id)
        .Bind(2, conversation->started_at)
        .Bind(3, conversation->last_at)
        .Bind(4, conversation->message_count)
        .Bind(5, conversation->token_count)
        .Bind(6, conversation->provider)
        .Bind(7, conversation->model);
    CAPSULE_RETURN_IF_ERROR(replace.Run());
    conversation->dirty = false;
  }
  CAPSULE_RETURN_IF_ERROR(FlushRuns());
  Statement& machine = sql_->replace_machine;
  for (const auto& [name, dirty] : dirty_machines_) {
    const journal::MachineTail& tail = tails_.machines[name];
    CAPSULE_RETURN_IF_ERROR(machine.Bind(1, name)
                                .Bind(2, static_cast<int64_t>(tail.seq))
                                .Bind(3, tail.id)
                                .Bind(4, static_cast<int64_t>(tail.clock))
                                .Run());
  }
  dirty_machines_.clear();
  Statement& state = sql_->replace_state;
  std::optional<std::string> max_ts;
  if (!state_.max_ts.empty()) max_ts = state_.max_ts;
  return state.Bind(1, static_cast<int64_t>(state_.journal_offset))
      .Bind(2, state_.last_event_id)
      .Bind(3, static_cast<int64_t>(state_.last_line_length))
      .Bind(4, static_cast<int64_t>(state_.events))
      .Bind(5, max_ts)
      .Bind(6, state_.settings)
      .Run();
}

}  // namespace capsule::owned
