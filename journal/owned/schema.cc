#include "journal/owned/schema.h"

namespace capsule::owned {

namespace {

// Version 1. Timestamps are the journal's own strings (UTC RFC 3339); compare them with
// julianday() in SQL, since a fraction of a second sorts wrongly as text.
constexpr char kVersion1[] = R"sql(
CREATE TABLE owned_meta (
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
);

-- How far into the journal the database has projected, and the settings it was built with.
CREATE TABLE projection_state (
  id                INTEGER PRIMARY KEY CHECK (id = 1),
  journal_offset    INTEGER NOT NULL,  -- bytes of the journal projected (whole lines)
  last_event_id     TEXT,              -- the id of the line ending at journal_offset
  last_line_length  INTEGER NOT NULL,  -- that line's length with its newline
  events            INTEGER NOT NULL,  -- events projected
  max_ts            TEXT,              -- the latest ts seen (retention's clock)
  settings          TEXT NOT NULL      -- canonical JSON of the settings in force
);

-- Each machine's last projected event: following the journal checks its chains.
CREATE TABLE journal_machines (
  machine TEXT PRIMARY KEY,
  seq     INTEGER NOT NULL,
  id      TEXT NOT NULL,
  clock   INTEGER NOT NULL
);

-- Every event of the journal, without its data: provenance points here.
CREATE TABLE journal_events (
  position        INTEGER PRIMARY KEY,  -- 1, 2, 3 ... in journal order
  event_id        TEXT NOT NULL UNIQUE,
  clock           INTEGER NOT NULL,
  machine         TEXT NOT NULL,
  seq             INTEGER NOT NULL,
  ts              TEXT NOT NULL,
  type            TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  run_id          TEXT
);

CREATE TABLE conversations (
  conversation_id TEXT PRIMARY KEY,
  started_at      TEXT NOT NULL,
  last_at         TEXT NOT NULL,
  message_count   INTEGER NOT NULL,
  token_count     INTEGER NOT NULL,
  provider        TEXT,             -- the pinned provider and model now
  model           TEXT
);

-- Append-only: one row per message event, in journal order within its conversation.
CREATE TABLE messages (
  message_id      TEXT PRIMARY KEY,  -- the event's id
  conversation_id TEXT NOT NULL REFERENCES conversations (conversation_id),
  seq             INTEGER NOT NULL,  -- 1, 2, 3 ... per conversation
  role            TEXT NOT NULL,     -- system, user, assistant, tool_call, tool
  ts              TEXT NOT NULL,
  content         TEXT NOT NULL,     -- text; tool arguments or results as canonical JSON
  content_bytes   INTEGER NOT NULL,  -- the full body's size
  trimmed         INTEGER NOT NULL,  -- 1: content is a prefix, body_sha256 names the body
  body_sha256     TEXT REFERENCES blobs (sha256),
  tool_call_id    TEXT,
  tool_name       TEXT,
  is_error        INTEGER,
  provider        TEXT,              -- pinned: the event's own, else the conversation's
  model           TEXT,
  tokens          INTEGER NOT NULL,  -- data.tokens, else ceil(content_bytes / 4)
  run_id          TEXT,
  UNIQUE (conversation_id, seq)
);

-- Full bodies of trimmed tool results, each stored once by its SHA-256.
CREATE TABLE blobs (
  sha256 TEXT PRIMARY KEY,
  size   INTEGER NOT NULL,
  body   BLOB NOT NULL
);

CREATE TABLE agent_facts (
  fact_id           TEXT PRIMARY KEY,  -- the id of the fact_remembered event
  subject           TEXT NOT NULL,
  key               TEXT NOT NULL,
  value             TEXT NOT NULL CHECK (json_valid(value)),  -- canonical JSON
  confidence        REAL NOT NULL,
  source_message_id TEXT NOT NULL,     -- provenance: the event the fact came from
  conversation_id   TEXT NOT NULL,
  valid_from        TEXT NOT NULL,     -- the remembering event's ts
  valid_to          TEXT,              -- the ending event's ts; NULL while valid
  ended_by          TEXT,              -- the fact_expired or superseding fact_remembered
  end_source        TEXT               -- a fact_expired's own source
);
CREATE INDEX agent_facts_by_subject ON agent_facts (subject, key);

CREATE TABLE agent_runs (
  run_id          TEXT PRIMARY KEY,
  framework       TEXT NOT NULL,     -- the framework driving it now (its last run_opened)
  first_framework TEXT NOT NULL,     -- the framework that opened it first
  thread_key      TEXT NOT NULL,
  conversation_id TEXT NOT NULL,
  status          TEXT NOT NULL,     -- running, awaiting, or run_closed's status
  awaiting        TEXT,
  steps           INTEGER NOT NULL,  -- events carrying this run_id
  cost            REAL NOT NULL,     -- the sum of data.cost of those events
  resumes         INTEGER NOT NULL,  -- run_opened events after the first
  opened_at       TEXT NOT NULL,
  updated_at      TEXT NOT NULL,
  closed_at       TEXT,
  closed_at_unix  REAL               -- closed_at in seconds since 1970, for retention
);
CREATE INDEX agent_runs_closed ON agent_runs (closed_at_unix);
)sql";

// Version 2: search. search_text is a contentless FTS5 index (BM25): its rowid is the
// event's journal_events.position and its one column the event's searchable text (a message's
// content as stored, a fact's subject, key and value); the text itself stays in messages and
// agent_facts. embeddings holds the vectors events carry (data.embedding), the source of the
// vector index (journal/owned/vector_index.h).
constexpr char kVersion2[] = R"sql(
CREATE VIRTUAL TABLE search_text USING fts5 (text, content = '', tokenize = 'unicode61 remove_diacritics 2');

CREATE TABLE embeddings (
  position INTEGER PRIMARY KEY REFERENCES journal_events (position),
  model    TEXT NOT NULL,
  dims     INTEGER NOT NULL,
  vector   BLOB NOT NULL  -- dims IEEE 754 float32, little-endian, as given (not normalised)
);
CREATE INDEX embeddings_by_model ON embeddings (model, position);
)sql";

Status SetVersions(Database& db) {
  CAPSULE_RETURN_IF_ERROR(db.Execute("PRAGMA user_version = " + std::to_string(kSchemaVersion)));
  CAPSULE_ASSIGN_OR_RETURN(Statement meta,
                           db.Prepare("INSERT OR REPLACE INTO owned_meta (key, value) VALUES ('compatible_version', ?)"));
  return meta.Bind(1, std::to_string(kCompatibleVersion)).Run();
}

}  // namespace

const std::vector<std::string>& Migrations() {
  static const std::vector<std::string> migrations = {kVersion1, kVersion2};
  return migrations;
}

Status MigrateToCurrent(Database& db) {
  CAPSULE_ASSIGN_OR_RETURN(int64_t version, db.QueryInt("PRAGMA user_version"));
  const std::vector<std::string>& steps = Migrations();
  for (size_t i = static_cast<size_t>(version); i < steps.size(); ++i) {
    Status done = db.Execute(steps[i]);
    if (!done.ok()) return done.WithContext("migration to schema version " + std::to_string(i + 1));
  }
  return SetVersions(db);
}

Result<SchemaState> CheckSchema(Database& db) {
  Result<int64_t> version = db.QueryInt("PRAGMA user_version");
  if (!version.ok()) {
    if (version.status().code() == Code::kCorruption) return SchemaState::kRebuild;  // not a database
    return version.status();
  }
  if (*version == kSchemaVersion) return SchemaState::kCurrent;
  if (*version < kSchemaVersion) return SchemaState::kRebuild;
  // Newer: usable only when its writer said builds of this version can follow it.
  int64_t compatible = *version;
  Result<Statement> meta = db.Prepare("SELECT value FROM owned_meta WHERE key = 'compatible_version'");
  if (meta.ok()) {
    Result<bool> row = meta->Step();
    if (row.ok() && *row) compatible = std::atoll(meta->ColumnText(0).c_str());
  }
  if (compatible <= kSchemaVersion) return SchemaState::kCurrent;
  return Status::FailedPrecondition(db.name(), "schema version " + std::to_string(*version) +
                                                   " is newer than this build's " + std::to_string(kSchemaVersion) +
                                                   "; upgrade capsule");
}

}  // namespace capsule::owned
