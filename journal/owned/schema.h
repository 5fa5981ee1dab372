// The owned-state schema (man/capsule.5, "OWNED STATE"): its tables, its version, and the
// rule for opening a database some other build wrote.
//
// Versions, after Chromium's sql::MetaTable: `PRAGMA user_version` is the schema version of
// the build that wrote the database, and owned_meta's `compatible_version` is the oldest
// schema version whose builds can still read and follow it. A build whose kSchemaVersion is V
// opening a database of version D:
//   D == V                      current: used as is;
//   D == 0 or D < V             older (or empty): rebuilt from the journal (it is a cache);
//   D > V, compatible <= V      newer but compatible (it only added to the schema): used;
//   D > V, compatible > V       refused: "schema version D is newer than this build's V;
//                               upgrade capsule".
// A fresh database is made by running every migration in order (Migrations()[i] takes
// version i to i + 1), so a database made in one step and one migrated step by step agree.
//
// Thread-safety: pure functions over a Database used by one thread.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/status.h"
#include "journal/owned/sqlite.h"

namespace capsule::owned {

inline constexpr int kSchemaVersion = 2;
// The oldest schema version whose builds can read and follow a database this build writes
// (version 1 builds would follow without filling search_text and embeddings).
inline constexpr int kCompatibleVersion = 2;

// The SQL of each migration: Migrations()[0] makes version 1 from an empty database.
const std::vector<std::string>& Migrations();

// Runs the migrations from the database's version up to kSchemaVersion and records the
// version and the compatible version. On an empty database: the whole schema.
Status MigrateToCurrent(Database& db);

enum class SchemaState {
  kCurrent,  // usable as is (this version, or a newer compatible one)
  kRebuild,  // empty, older, or not a database of ours: rebuild from the journal
};

// Reads the database's version and applies the rule above; FailedPrecondition when it is
// newer than this build can use.
Result<SchemaState> CheckSchema(Database& db);

}  // namespace capsule::owned
