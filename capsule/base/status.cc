#include "capsule/base/status.h"

#include <cerrno>
#include <cstring>

namespace capsule {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kInvalidArgument: return "invalid argument";
    case Code::kCorruption: return "corruption";
    case Code::kIOError: return "I/O error";
    case Code::kNotFound: return "not found";
    case Code::kAlreadyExists: return "already exists";
    case Code::kFailedPrecondition: return "failed precondition";
    case Code::kPermissionDenied: return "permission denied";
    case Code::kUnavailable: return "unavailable";
  }
  return "unknown";
}

Status Status::IOError(std::string what, int err) {
  // What happened, in the code; the errno kept for the FUSE edge.
  Code code = err == ENOENT ? Code::kNotFound : err == EEXIST ? Code::kAlreadyExists : Code::kIOError;
  Status status(code, Join(what, std::strerror(err)));
  status.sys_errno_ = err;
  return status;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  Status status = *this;
  status.message_ = context + ": " + message_;
  return status;
}

}  // namespace capsule
