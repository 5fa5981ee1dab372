// Whether a folder is a capsule, and which capsule, if any, a path lies inside: what a command
// checks before it writes anything (man capsule.1, CONVENTIONS: nothing is left behind by a
// refused command, and nothing is written inside another capsule).
//
// Every name is looked at with lstat(2): a link is never taken for a manifest or a local
// folder, and nothing is read through one.
//
// Thread-safety: functions of the file system only; no state.
#pragma once

#include <optional>
#include <string>

#include "capsule/base/status.h"

namespace capsule {

// The one refusal of a path that is not a capsule, whichever command met it: InvalidArgument
// "DIR: not a capsule folder (WHY)", then a hint line, kNotACapsuleHint (the command line
// prints it on a line of its own).
inline constexpr char kNotACapsuleHint[] =
    "hint: name a capsule's folder or its mountpoint, or make one with capsule init";
Status NotACapsule(const std::string& dir, const std::string& why = "no manifest.json");

// Ok when `dir` is a capsule folder by its manifest: a folder (a link to one, as the user
// named it, is followed) holding manifest.json as a regular file. A folder extracted from an
// export, without .capsule/, is one. NotFound "DIR: no such file or folder";
// NotACapsule(DIR), or NotACapsule(DIR, "not a folder").
Status CheckCapsuleFolder(const std::string& dir);

// A capsule a path lies inside.
struct EnclosingCapsule {
  // The capsule folder (manifest.json and .capsule/ in it), or the root of a capsulefs mount
  // (.capsulefs-control in it, and another file system than its parent's).
  std::string folder;
  bool mount = false;
  // For a mount: the path lies in its files/, the agent's workspace, where a user's files go
  // through the mount like any other write.
  bool in_workspace = false;
};

// The capsule whose folder (or capsulefs mount) a write of `path` would land inside, or
// nullopt. `path` need not exist: the longest part of it that does is resolved to where it
// really is (realpath(3): a write follows the same links), the rest taken as written, and the
// folders holding it are examined from the nearest up. The walk stops at the first capsule
// found, at the root of the file system the path is on (a capsule does not span file
// systems), or at "/".
Result<std::optional<EnclosingCapsule>> FindEnclosingCapsule(const std::string& path);

// InvalidArgument "WHAT PATH: is inside the capsule folder FOLDER, ..." when a write of `path` (what
// the command names `what`, "-o", "DIR") would land inside a capsule; Ok otherwise. In a
// mount's workspace (files/) the write is the user's own and allowed, unless
// `secret_inside_workspace` (a private key never lands in a capsule, not even its workspace).
Status CheckNotInsideCapsule(const std::string& what, const std::string& path, bool secret_inside_workspace = false);

}  // namespace capsule
