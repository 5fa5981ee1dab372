// Taking a capsule's files edited behind its manifest on purpose, the change of trust kept in
// the history: `capsule accept`, and the --accept-edits of the commands that refuse such a
// capsule (capsulefs -o accept_edits, capsule exec, stream pack, move), share it.
//
// Thread-safety: plain functions.
#pragma once

#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/status.h"
#include "capsule/format/trust.h"

namespace capsule::journal {

// The edits as an edits_accepted event lists them: each path and its digest before and after.
Json EditsJson(const std::vector<AcceptedEdit>& edits);

// Appends an edits_accepted event for `edits` to the journal of `dir`, then re-seals its
// manifest to the files as they were found (AcceptEdits: refused while a capsulefs holds the
// folder). Nothing is appended or re-sealed for no edits.
Status AcceptEditsRecorded(const std::string& dir, const std::vector<AcceptedEdit>& edits);

// For a command told to take the edits (--accept-edits) before it checks the capsule at
// `dir`: when the capsule at rest is not trusted as it is (CheckTrusted), finds its edits and
// takes them as above. Returns the edits taken; none when it was trusted already or is
// mounted (its mount vouches for it).
Result<std::vector<AcceptedEdit>> AcceptEditsIfAny(const std::string& dir);

}  // namespace capsule::journal
