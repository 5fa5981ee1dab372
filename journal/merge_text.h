// Merging two journals given as text, for a receiver of a Move Stream whose journal and the
// arriving one diverged. The same rules as Journal::MergeFrom: both sides checked first, the
// union by id in (clock, machine, seq) order, and a conflicting event (same machine and seq,
// different id) refuses the merge naming both ids.
//
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"
#include "journal/event.h"

namespace capsule::journal {

// The events of `theirs` that `ours` lacks. Both are checked journals (each machine's chain
// whole from seq 1). Corruption when an event of theirs conflicts with one of ours.
Result<std::vector<const Event*>> EventsToAdd(const std::vector<Event>& ours, const std::vector<Event>& theirs);

// Ok when, for every machine, what `held` has of its chain and what `arriving` has are one
// the prefix of the other: each conversation's events held here are a prefix of what arrives,
// chain by chain. FailedPrecondition otherwise, naming the conversation and the first event
// that differs (machine, seq, and both ids); Corruption when a side is not a journal.
Status CheckSharedPrefix(std::string_view held, std::string_view arriving);

// The merged journal's text. Lines of `held` are kept byte for byte.
Result<std::string> MergeJournalTexts(std::string_view held, std::string_view arriving);

}  // namespace capsule::journal
