// The journal's appends through the mount: the JournalSink capsulefs plugs in when this
// machine holds the capsule.
//
// A line is a full event or just {"type": ..., "data": ...}; either way the journal library
// assigns machine, seq, prev, clock, ts and id and appends the canonical line durably
// (journal/journal.h). A line that is not a JSON object, lacks a string type, carries data
// that is not an object or fails its type's check, or names another machine (forging that
// machine's chain) is refused with InvalidArgument, which the FUSE edge answers with EINVAL;
// nothing of it is kept.
//
// Thread-safety: the returned sink may be called from any thread; appends are serialized.
#pragma once

#include <string>

#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"
#include "fs/journal_sink.h"

namespace capsule::fs {

// The journal of the capsule folder held open as `folder` (the mount's): opened beneath it.
Result<JournalSink> MakeJournalAppender(const DirFd& folder);

}  // namespace capsule::fs
