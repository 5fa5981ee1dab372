#include "capsule/base/output_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace capsule {

Result<OutputFile> OutputFile::Open(const std::string& path, mode_t mode) {
  OutputFile out;
  out.path_ = path;
  if (path == "-") {
    out.sink_ = std::make_unique<FdSink>(STDOUT_FILENO, "standard output");
    return out;
  }
  struct stat followed {};
  if (::stat(path.c_str(), &followed) == 0 && (S_ISFIFO(followed.st_mode) || S_ISCHR(followed.st_mode))) {
    CAPSULE_ASSIGN_OR_RETURN(out.fd_, OpenFile(path, O_WRONLY | O_NOCTTY | O_CLOEXEC));
    out.sink_ = std::make_unique<FdSink>(out.fd_.get(), path);
    return out;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    const char* what = S_ISLNK(st.st_mode)    ? "a symbolic link; name the file it points to, or - for standard output"
                       : S_ISDIR(st.st_mode)  ? "a directory; name a file in it"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : nullptr;
    if (what != nullptr) return Status::InvalidArgument(path, std::string("is ") + what);
  } else if (errno != ENOENT) {
    return Status::IOError(path, errno);
  }
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile atomic, AtomicFile::Create(path, mode));
  out.atomic_.emplace(std::move(atomic));
  out.sink_ = std::make_unique<FdSink>(out.atomic_->fd(), path);
  return out;
}

Status OutputFile::Commit() {
  if (atomic_) return atomic_->Commit();
  return Status::Ok();  // written in place as it went (FdSink writes through)
}

}  // namespace capsule
