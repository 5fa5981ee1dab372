// .capsule/times.json: when each workspace path was last modified, local to this machine (a
// capsule's portable state is content: times are not exported or moved). The mount keeps it
// at each checkpoint; `capsule init --workspace` starts it from the source's times.
//
//   {"<path>":[sec,nsec],...}   canonical JSON
//
// A missing or unreadable file gives no times: they are a convenience, never a reason to
// refuse a mount.
#pragma once

#include <time.h>

#include <map>
#include <string>

#include "capsule/base/canonical_json.h"
#include "capsule/base/dir_fd.h"
#include "capsule/base/status.h"

namespace capsule {

using WorkspaceTimes = std::map<std::string, struct timespec>;

WorkspaceTimes LoadWorkspaceTimes(const std::string& path);
// The same for `rel` beneath the folder held open (a link there is not followed: no times).
WorkspaceTimes LoadWorkspaceTimes(const DirFd& folder, const std::string& rel);
Status SaveWorkspaceTimes(const std::string& path, const WorkspaceTimes& times);

// The JSON form, for files and for the change log's "times" member.
Json WorkspaceTimesJson(const WorkspaceTimes& times);
// Its canonical text, written without building the Json (the file SaveWorkspaceTimes writes).
Result<std::string> WorkspaceTimesText(const WorkspaceTimes& times);
// Reads {"<path>":[sec,nsec]} into `times`; entries of another shape are skipped.
void ParseWorkspaceTimes(const Json& json, WorkspaceTimes* times);

}  // namespace capsule
