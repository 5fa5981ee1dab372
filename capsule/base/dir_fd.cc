#include "capsule/base/dir_fd.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

namespace capsule {

namespace {

}  // namespace

Result<DirFd> DirFd::Open(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ELOOP) return Status::InvalidArgument(path, "is a link where a folder belongs; links are never followed");
    if (errno == ENOTDIR) return Status::InvalidArgument(path, "is not a folder");
    return Status::IOError(path, errno);
  }
  return DirFd(UniqueFd(fd), path);
}

Result<DirFd> DirFd::OpenGiven(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, capsule::OpenFile(path, O_RDONLY | O_DIRECTORY));
  return DirFd(std::move(fd), path);
}

Result<DirFd> DirFd::Duplicate() const {
  int fd = ::fcntl(fd_.get(), F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return Status::IOError(path_, errno);
  return DirFd(UniqueFd(fd), path_);
}

Result<DirFd> DirFd::OpenDir(const std::string& rel) const {
  std::string shown = PathOf(rel);
  Result<UniqueFd> fd = OpenBeneathFd(fd_.get(), rel, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, shown);
  if (!fd.ok()) {
    // Say which: a link where the folder belongs, or a file.
    Result<struct stat> st = Stat(rel);
    if (st.ok() && S_ISLNK(st->st_mode)) return Status::InvalidArgument(shown, "is a link where a folder belongs; links are never followed");
    if (st.ok() && !S_ISDIR(st->st_mode)) return Status::InvalidArgument(shown, "is not a folder");
    return fd.status();
  }
  return DirFd(std::move(fd).value(), shown);
}

Result<UniqueFd> DirFd::OpenFile(const std::string& rel, int flags, mode_t mode) const {
  return OpenBeneathFd(fd_.get(), rel, flags | O_NOFOLLOW, mode, PathOf(rel));
}

Result<std::string> DirFd::ReadFile(const std::string& rel) const {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(rel, O_RDONLY));
  return ReadFd(fd.get(), PathOf(rel));
}

Result<std::string> DirFd::ReadFileBounded(const std::string& rel, uint64_t max, std::string_view what) const {
  // O_NONBLOCK: a FIFO is refused by the check, not waited on.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(rel, O_RDONLY | O_NOCTTY | O_NONBLOCK));
  return ReadFileBoundedFd(fd.get(), PathOf(rel), max, what);
}

Result<std::vector<TreeEntry>> DirFd::ListTree(const std::string& rel, const std::vector<std::string>& skip) const {
  if (rel.empty()) return ListTreeAt(fd_.get(), path_, skip);
  CAPSULE_ASSIGN_OR_RETURN(DirFd sub, OpenDir(rel));
  return sub.ListTree("", skip);
}

Result<std::vector<std::string>> DirFd::ListFileNames(const std::string& rel, std::vector<std::string>* others) const {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathFd(fd_.get(), rel, O_RDONLY | O_DIRECTORY, 0, PathOf(rel)));
  return ListFileNamesAt(std::move(fd), PathOf(rel), others);
}

Result<std::pair<UniqueFd, std::string>> DirFd::Parent(const std::string& rel) const {
  std::string parent = DirName(rel);
  if (parent == ".") parent.clear();
  std::string name = BaseName(rel);
  if (name.empty() || name == "." || name == ".." || rel.find('/') == 0) {
    return Status::InvalidArgument(PathOf(rel), "not a plain relative path");
  }
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathFd(fd_.get(), parent, O_RDONLY | O_DIRECTORY, 0, PathOf(parent)));
  return std::make_pair(std::move(fd), std::move(name));
}

Result<struct stat> DirFd::Stat(const std::string& rel) const {
  struct stat st;
  if (rel.empty()) {
    if (::fstat(fd_.get(), &st) != 0) return Status::IOError(path_, errno);
    return st;
  }
  CAPSULE_ASSIGN_OR_RETURN(auto parent, Parent(rel));
  if (::fstatat(parent.first.get(), parent.second.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    return Status::IOError(PathOf(rel), errno);
  }
  return st;
}

Status DirFd::MakeDir(const std::string& rel, mode_t mode, bool exist_ok) const {
  CAPSULE_ASSIGN_OR_RETURN(auto parent, Parent(rel));
  const int parent_fd = parent.first.get();
  const char* name = parent.second.c_str();
  if (::mkdirat(parent_fd, name, mode) != 0) {
    if (errno != EEXIST || !exist_ok) return Status::IOError(PathOf(rel), errno);
    struct stat st;
    if (::fstatat(parent_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) return Status::IOError(PathOf(rel), errno);
    if (S_ISLNK(st.st_mode)) return Status::InvalidArgument(PathOf(rel), "is a link where a folder belongs; links are never followed");
    if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(PathOf(rel), "is not a folder");
    return Status::Ok();
  }
  // The mode as asked, not as the umask leaves it; set on the folder just made, reached
  // without a link.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd made, OpenBeneathFd(parent_fd, parent.second, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, PathOf(rel)));
  if (::fchmod(made.get(), mode) != 0) return Status::IOError(PathOf(rel), errno);
  return Status::Ok();
}

Status DirFd::Rename(const std::string& from, const std::string& to, unsigned flags) const {
  CAPSULE_ASSIGN_OR_RETURN(auto source, Parent(from));
  CAPSULE_ASSIGN_OR_RETURN(auto target, Parent(to));
  if (::renameat2(source.first.get(), source.second.c_str(), target.first.get(), target.second.c_str(), flags) != 0) {
    return Status::IOError(PathOf(to), errno);
  }
  return Status::Ok();
}

Status DirFd::Unlink(const std::string& rel, bool folder) const {
  CAPSULE_ASSIGN_OR_RETURN(auto parent, Parent(rel));
  if (::unlinkat(parent.first.get(), parent.second.c_str(), folder ? AT_REMOVEDIR : 0) != 0) {
    return Status::IOError(PathOf(rel), errno);
  }
  return Status::Ok();
}

namespace {

// Removes the entry `name` of the folder `parent_fd` and everything under it, each folder
// opened relative to its parent with O_NOFOLLOW.
Status RemoveEntryAt(int parent_fd, const std::string& name, const std::string& shown) {
  struct stat st;
  if (::fstatat(parent_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IOError(shown, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    int fd = ::openat(parent_fd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) return Status::IOError(shown, errno);
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(fd), ::closedir);
    if (dir == nullptr) {
      ::close(fd);
      return Status::IOError(shown, errno);
    }
    std::vector<std::string> names;
    while (struct dirent* ent = ::readdir(dir.get())) {
      std::string child = ent->d_name;
      if (child != "." && child != "..") names.push_back(std::move(child));
    }
    for (const std::string& child : names) {
      CAPSULE_RETURN_IF_ERROR(RemoveEntryAt(::dirfd(dir.get()), child, JoinPath(shown, child)));
    }
    if (::unlinkat(parent_fd, name.c_str(), AT_REMOVEDIR) != 0) return Status::IOError(shown, errno);
    return Status::Ok();
  }
  if (::unlinkat(parent_fd, name.c_str(), 0) != 0 && errno != ENOENT) return Status::IOError(shown, errno);
  return Status::Ok();
}

}  // namespace

Status DirFd::RemoveTree(const std::string& rel) const {
  Result<std::pair<UniqueFd, std::string>> parent = Parent(rel);
  if (!parent.ok()) return parent.status().code() == Code::kNotFound ? Status::Ok() : parent.status();
  return RemoveEntryAt(parent->first.get(), parent->second, PathOf(rel));
}

Status DirFd::SyncDir(const std::string& rel) const {
  if (rel.empty()) {
    if (::fsync(fd_.get()) != 0) return Status::IOError(path_, errno);
    return Status::Ok();
  }
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathFd(fd_.get(), rel, O_RDONLY | O_DIRECTORY, 0, PathOf(rel)));
  if (::fsync(fd.get()) != 0) return Status::IOError(PathOf(rel), errno);
  return Status::Ok();
}

Result<AtomicFile> DirFd::CreateAtomic(const std::string& rel, mode_t mode) const {
  CAPSULE_ASSIGN_OR_RETURN(auto parent, Parent(rel));
  std::string parent_rel = DirName(rel);
  return AtomicFile::CreateIn(std::move(parent.first), PathOf(parent_rel == "." ? "" : parent_rel), parent.second,
                              mode);
}

Status DirFd::WriteFileAtomic(const std::string& rel, std::string_view data, mode_t mode) const {
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, CreateAtomic(rel, mode));
  CAPSULE_RETURN_IF_ERROR(file.Append(data));
  return file.Commit();
}

}  // namespace capsule
