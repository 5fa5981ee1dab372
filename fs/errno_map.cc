#include "fs/errno_map.h"

#include <cerrno>

namespace capsule::fs {

int ToErrno(const Status& status) {
  if (status.ok()) return 0;
  if (status.sys_errno().has_value() && *status.sys_errno() != 0) return *status.sys_errno();
  switch (status.code()) {
    case Code::kOk: return 0;
    case Code::kInvalidArgument: return EINVAL;
    case Code::kCorruption: return EIO;
    case Code::kIOError: return EIO;
    case Code::kNotFound: return ENOENT;
    case Code::kAlreadyExists: return EEXIST;
    case Code::kFailedPrecondition: return EROFS;  // not held here, retired, read-only
    case Code::kPermissionDenied: return EPERM;
    case Code::kUnavailable: return EAGAIN;
  }
  return EIO;
}

Status FsError(int err, const std::string& what) { return Status::IOError(what, err); }

}  // namespace capsule::fs
