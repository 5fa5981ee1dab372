// The FUSE edge: the one table from the project's Status to the errno the kernel gets.
//
// Inside fs/ every helper returns a Status or Result; only the callbacks in fuse_table.cc turn
// a failure into an errno, through ToErrno. A failure that must reach the caller as a
// particular errno is made with FsError(errno, what), which carries it as sys_errno.
#pragma once

#include <string>

#include "capsule/base/status.h"

namespace capsule::fs {

// The errno for a failed Status: its sys_errno when it has one, else by its Code.
int ToErrno(const Status& status);

// A failure that answers `err` at the FUSE edge.
Status FsError(int err, const std::string& what);

}  // namespace capsule::fs
