// Helpers for the owned-state tests: a whole database as text, and a clock that moves.
#pragma once

#include <memory>
#include <string>

#include "capsule/base/status.h"
#include "journal/journal.h"

namespace capsule::owned::testing {

// Every row of every table of the database at `path` (the bookkeeping tables too), each
// table's rows sorted by all their columns: two databases with the same rows give the same text.
Result<std::string> DumpDatabase(const std::string& path);

// UTC RFC 3339 of 2026-12-01T00:00:00Z plus `seconds`.
std::string TimeAt(int64_t seconds);

// Journal options whose clock reads *clock seconds after 2026-12-01T00:00:00Z and then
// advances it by `step` seconds; no fdatasync.
journal::JournalOptions SteppingClock(std::shared_ptr<int64_t> clock, int64_t step);

}  // namespace capsule::owned::testing
