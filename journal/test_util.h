// Helpers for the journal's tests and benchmark: scratch folders and capsules that act as
// distinct machines (a copy of a capsule with its own .capsule/machine).
//
// Thread-safety: plain functions touching the file system; not for concurrent use on one path.
#pragma once

#include <string>

#include "capsule/base/status.h"
#include "capsule/base/temp_dir.h"
#include "journal/journal.h"

namespace capsule::journal::testing {

using ::capsule::testing::MakeTempDir;

// The machine id "m-" + 16 hex digits of `n`.
std::string MachineName(int n);

// Creates a capsule at `dir` held here, whose machine id is `machine`.
Status MakeTestCapsule(const std::string& dir, const std::string& machine);

// Copies the capsule `from` to `to` (absent) with everything in .capsule/, then gives the
// copy the machine id `machine`: a second machine that diverges from here.
Status CopyCapsuleAs(const std::string& from, const std::string& to, const std::string& machine);

// Options whose clock always says 2026-12-02T16:40:00Z, so runs give the same bytes.
JournalOptions FixedTimeOptions(bool sync = true);

}  // namespace capsule::journal::testing
