// The libfuse low-level operation table: each callback calls one CapsuleFs::do_<op> and only
// replies (errno through ToErrno, the one table in errno_map.cc).
#pragma once

#include <fuse3/fuse_lowlevel.h>

namespace capsule::fs {

// The operations; fuse_session_new's userdata must be the CapsuleFs.
const fuse_lowlevel_ops& Operations();

}  // namespace capsule::fs
