// What the mount does with writes to the capsule files whose content is checked (the
// environment spec, schedules, thread files, attachments): the early check that lets a write
// that can never become valid fail at write(2), and the copy kept of what a commit refused.
//
// Thread-safety: pure functions and file writes; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "capsule/base/status.h"

namespace capsule::fs {

// Whether `text` could still become one JSON document by what is appended to it: JSON so far
// (a prefix of some JSON text), with nothing but whitespace after a whole value. Empty text
// (or only whitespace) could.
bool CouldBecomeJson(std::string_view text);

// Whether `text` could still become a journal line, a JSON object: it opens with '{' (after
// whitespace) and, in its first `check_bytes`, is JSON so far.
bool CouldBecomeJsonObject(std::string_view text, size_t check_bytes);

// Keeps `content`, the bytes of the capsule file `rel` that a commit refused, in
// DIR/.capsule/rejected/<rel> (durably, replacing an earlier refused copy). Returns where,
// relative to `dir`.
Result<std::string> KeepRejected(const std::string& dir, const std::string& rel, std::string_view content);

// A commit of `rel` succeeded: the refused copy, if any, is stale and goes.
void ForgetRejected(const std::string& dir, const std::string& rel);

}  // namespace capsule::fs
