// A copy of a capsule folder into an empty one, as a move's staging area starts: blobs
// hard-linked (a blob's name is its digest, so it is never rewritten in place), every other
// file written through the durable-write path, temporary debris skipped, and of the local
// folder .capsule/ only the files the caller names.
//
// Thread-safety: a free function; the caller keeps others from changing either folder.
#pragma once

#include <initializer_list>
#include <string>

#include "capsule/base/status.h"

namespace capsule {

// Copies the capsule at `from` into `to` (absent or empty). `local_files` are paths from
// local_files.h (".capsule/machine", ...), each copied when `from` has it.
Status CopyCapsule(const std::string& from, const std::string& to, std::initializer_list<const char*> local_files);

}  // namespace capsule
