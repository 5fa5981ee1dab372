#include "capsule/base/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <utility>

namespace capsule {

void UniqueFd::Reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

Result<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return Status::IOError(path, errno);
  return UniqueFd(fd);
}

Result<UniqueFd> OpenBeneathFd(int dir_fd, const std::string& rel, int flags, mode_t mode, const std::string& shown) {
  struct open_how how {};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC);
  how.mode = (flags & (O_CREAT | O_TMPFILE)) != 0 ? mode : 0;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  const char* name = rel.empty() ? "." : rel.c_str();
  long fd;
  do {
    fd = ::syscall(SYS_openat2, dir_fd, name, &how, sizeof how);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    if (errno == ELOOP || errno == EXDEV) return Status::InvalidArgument(shown, "reached through a link; links are never followed");
    return Status::IOError(shown, errno);
  }
  return UniqueFd(static_cast<int>(fd));
}

Result<UniqueFd> OpenBeneath(const std::string& root, const std::string& rel, int flags, mode_t mode) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd root_fd, OpenFile(root, O_PATH | O_DIRECTORY));
  return OpenBeneathFd(root_fd.get(), rel, flags, mode, JoinPath(root, rel));
}

Status WriteAll(int fd, std::string_view data, const std::string& name) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(name, errno);
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status WriteAll(int fd, std::span<const std::string_view> pieces, const std::string& name) {
  std::vector<iovec> vectors;
  size_t next = 0;  // the first piece not yet in `vectors`
  while (next < pieces.size() || !vectors.empty()) {
    while (next < pieces.size() && vectors.size() < IOV_MAX) {
      std::string_view piece = pieces[next++];
      if (!piece.empty()) vectors.push_back(iovec{const_cast<char*>(piece.data()), piece.size()});
    }
    if (vectors.empty()) break;
    ssize_t n = ::writev(fd, vectors.data(), static_cast<int>(vectors.size()));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(name, errno);
    }
    // Drops what was written: whole vectors, then part of the first left.
    auto done = static_cast<size_t>(n);
    size_t whole = 0;
    while (whole < vectors.size() && done >= vectors[whole].iov_len) done -= vectors[whole++].iov_len;
    vectors.erase(vectors.begin(), vectors.begin() + static_cast<std::ptrdiff_t>(whole));
    if (done > 0) {
      vectors.front().iov_base = static_cast<char*>(vectors.front().iov_base) + done;
      vectors.front().iov_len -= done;
    }
  }
  return Status::Ok();
}

Result<size_t> ReadAt(int fd, char* buffer, size_t size, off_t offset, const std::string& name) {
  size_t done = 0;
  while (done < size) {
    ssize_t n = ::pread(fd, buffer + done, size - done, offset + static_cast<off_t>(done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(name, errno);
    }
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return done;
}

Result<std::string> ReadFd(int fd, const std::string& name) {
  // Read straight into the string, sized by fstat (a file that grows meanwhile is read on).
  struct stat st;
  size_t expected = ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  std::string data(expected + 1, '\0');
  size_t used = 0;
  for (;;) {
    if (used == data.size()) data.resize(data.size() * 2 + 65536);
    ssize_t n = ::read(fd, data.data() + used, data.size() - used);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(name, errno);
    }
    if (n == 0) break;
    used += static_cast<size_t>(n);
  }
  data.resize(used);
  return data;
}

Result<std::string> ReadFile(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY));
  return ReadFd(fd.get(), path);
}

Result<UniqueFd> OpenBeneathGiven(const std::string& root, const std::string& rel, int flags, mode_t mode) {
  int root_fd;
  do {
    root_fd = ::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  } while (root_fd < 0 && errno == EINTR);
  // A missing folder is named as the file looked for in it, as a read by path would.
  if (root_fd < 0) return Status::IOError(errno == ENOENT ? JoinPath(root, rel) : root, errno);
  UniqueFd held(root_fd);
  return OpenBeneathFd(root_fd, rel, flags | O_NOFOLLOW, mode, JoinPath(root, rel));
}

Result<std::string> ReadFileBeneath(const std::string& root, const std::string& rel) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathGiven(root, rel, O_RDONLY));
  return ReadFd(fd.get(), JoinPath(root, rel));
}

FileBytes& FileBytes::operator=(FileBytes&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, capacity_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    capacity_ = std::exchange(other.capacity_, 0);
  }
  return *this;
}

FileBytes::~FileBytes() {
  if (data_ != nullptr) ::munmap(data_, capacity_);
}

Status FileBytes::Reserve(size_t capacity, const std::string& name) {
  constexpr size_t kHugePage = 2 << 20;
  capacity = (capacity + kHugePage - 1) / kHugePage * kHugePage;
  void* mapped = ::mmap(nullptr, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return Status::IOError(name + ": memory to read it into", errno);
  (void)::madvise(mapped, capacity, MADV_HUGEPAGE);  // a hint: without it, small pages
  char* data = static_cast<char*>(mapped);
  if (size_ > 0) std::memcpy(data, data_, size_);
  if (data_ != nullptr) ::munmap(data_, capacity_);
  data_ = data;
  capacity_ = capacity;
  return Status::Ok();
}

Result<FileBytes> FileBytes::Read(int fd, const std::string& name) {
  FileBytes bytes;
  struct stat st;
  size_t expected = ::fstat(fd, &st) == 0 && st.st_size > 0 ? static_cast<size_t>(st.st_size) : 0;
  CAPSULE_RETURN_IF_ERROR(bytes.Reserve(expected + 1, name));
  for (;;) {
    if (bytes.size_ == bytes.capacity_) CAPSULE_RETURN_IF_ERROR(bytes.Reserve(2 * bytes.capacity_, name));
    CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd, bytes.data_ + bytes.size_, bytes.capacity_ - bytes.size_,
                                              static_cast<off_t>(bytes.size_), name));
    if (n == 0) break;
    bytes.size_ += n;
  }
  return bytes;
}

Result<FileBytes> FileBytes::Read(const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
  return Read(fd.get(), path);
}

ReadAtFunction FileReadAt(int fd, std::string name) {
  return [fd, name = std::move(name)](uint64_t offset, char* buffer, size_t size) {
    return ReadAt(fd, buffer, size, static_cast<off_t>(offset), name);
  };
}

ReadAtFunction TextReadAt(std::string_view text) {
  return [text](uint64_t offset, char* buffer, size_t size) -> Result<size_t> {
    if (offset >= text.size()) return size_t{0};
    size_t n = std::min<uint64_t>(size, text.size() - offset);
    std::memcpy(buffer, text.data() + offset, n);
    return n;
  };
}

Result<std::string> ReadAll(const ReadAtFunction& read, uint64_t from) {
  std::string text;
  size_t used = 0;
  for (;;) {
    if (text.size() - used < (1 << 20)) text.resize(std::max<size_t>(2 * text.size(), 4 << 20));
    CAPSULE_ASSIGN_OR_RETURN(size_t n, read(from + used, text.data() + used, text.size() - used));
    if (n == 0) break;
    used += n;
  }
  text.resize(used);
  return text;
}

Result<uint64_t> ReadPieces(const ReadAtFunction& read, uint64_t from, uint64_t to,
                            const std::function<void(std::string_view)>& consume) {
  if (to <= from) return uint64_t{0};
  std::string piece(static_cast<size_t>(std::min<uint64_t>(to - from, 1 << 20)), '\0');
  uint64_t total = 0;
  while (total < to - from) {
    size_t want = static_cast<size_t>(std::min<uint64_t>(piece.size(), to - from - total));
    CAPSULE_ASSIGN_OR_RETURN(size_t n, read(from + total, piece.data(), want));
    if (n == 0) break;
    consume(std::string_view(piece.data(), n));
    total += n;
  }
  return total;
}

Status SyncDirectory(const std::string& dir) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY));
  if (::fsync(fd.get()) != 0) return Status::IOError(dir, errno);
  return Status::Ok();
}

Status MakeDirectories(const std::string& path) {
  if (path.empty() || path == "/" || path == ".") return Status::Ok();
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return Status::Ok();
    return Status::AlreadyExists(path, "exists and is not a folder");
  }
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(path)));
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return Status::IOError(path, errno);
  return Status::Ok();
}

namespace {

std::string RandomSuffix() {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  uint64_t bits = rng();
  for (int i = 0; i < 12; ++i, bits >>= 4) out.push_back(kDigits[bits & 15]);
  return out;
}

}  // namespace

namespace {
thread_local StagingSync* current_staging = nullptr;
}  // namespace

Result<FileStamp> StampOf(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return Status::IOError(path, errno);
  return FileStamp{static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                   static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec};
}

StagingSync::StagingSync(std::string folder) : folder_(std::move(folder)), outer_(current_staging) {
  current_staging = this;
}

StagingSync::~StagingSync() { current_staging = outer_; }

Status StagingSync::Finish() {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(folder_, O_RDONLY | O_DIRECTORY));
  if (::syncfs(fd.get()) != 0) return Status::IOError(folder_, errno);
  return Status::Ok();
}

bool StagingSync::Covers(const std::string& path) {
  for (StagingSync* s = current_staging; s != nullptr; s = s->outer_) {
    if (path.size() > s->folder_.size() && path.compare(0, s->folder_.size(), s->folder_) == 0 &&
        path[s->folder_.size()] == '/') {
      return true;
    }
  }
  return false;
}

Result<AtomicFile> AtomicFile::Create(const std::string& path, mode_t mode) {
  std::string dir_path = DirName(path);
  int dir;
  do {
    dir = ::open(dir_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  } while (dir < 0 && errno == EINTR);
  if (dir < 0) return Status::IOError(path, errno);  // named by the file to write, as its temporary's create would
  return CreateIn(UniqueFd(dir), dir_path, BaseName(path), mode);
}

Result<AtomicFile> AtomicFile::CreateIn(UniqueFd dir, const std::string& dir_path, const std::string& name,
                                        mode_t mode) {
  std::string path = JoinPath(dir_path, name);
  // The temporary name starts with ".tmp-" so that listings and verification know it as
  // debris of an interrupted write, never as content.
  for (int attempt = 0; attempt < 16; ++attempt) {
    std::string temp = ".tmp-" + name + "." + RandomSuffix();
    int fd = ::openat(dir.get(), temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (fd >= 0) {
      ::fchmod(fd, mode);  // not subject to the umask
      return AtomicFile(std::move(dir), std::move(path), std::move(temp), UniqueFd(fd));
    }
    if (errno != EEXIST) return Status::IOError(path, errno);
  }
  return Status::IOError(path, "cannot create a temporary file beside it");
}

AtomicFile::AtomicFile(AtomicFile&& other) noexcept
    : dir_(std::move(other.dir_)),
      path_(std::move(other.path_)),
      name_(std::move(other.name_)),
      temp_name_(std::move(other.temp_name_)),
      fd_(std::move(other.fd_)) {
  other.temp_name_.clear();
}

AtomicFile::~AtomicFile() {
  if (!temp_name_.empty()) ::unlinkat(dir_.get(), temp_name_.c_str(), 0);
}

Status AtomicFile::Append(std::string_view data) {
  if (temp_name_.empty()) return Status::FailedPrecondition(path_, "file already committed");
  return WriteAll(fd_.get(), data, path_);
}

Status AtomicFile::Append(std::span<const std::string_view> pieces) {
  if (temp_name_.empty()) return Status::FailedPrecondition(path_, "file already committed");
  return WriteAll(fd_.get(), pieces, path_);
}

Status AtomicFile::Commit() {
  if (temp_name_.empty()) return Status::FailedPrecondition(path_, "file already committed");
  bool deferred = StagingSync::Covers(path_);
  if (!deferred && ::fsync(fd_.get()) != 0) return Status::IOError(path_, errno);
  fd_.Reset();
  if (::renameat(dir_.get(), temp_name_.c_str(), dir_.get(), name_.c_str()) != 0) return Status::IOError(path_, errno);
  temp_name_.clear();
  if (deferred) return Status::Ok();
  if (::fsync(dir_.get()) != 0) return Status::IOError(DirName(path_), errno);
  return Status::Ok();
}

Status AtomicFile::CommitNoReplace() {
  if (temp_name_.empty()) return Status::FailedPrecondition(path_, "file already committed");
  bool deferred = StagingSync::Covers(path_);
  if (!deferred && ::fsync(fd_.get()) != 0) return Status::IOError(path_, errno);
  fd_.Reset();
  if (::linkat(dir_.get(), temp_name_.c_str(), dir_.get(), name_.c_str(), 0) != 0) {
    if (errno == EEXIST) return Status::AlreadyExists(path_, "already exists");
    return Status::IOError(path_, errno);
  }
  ::unlinkat(dir_.get(), temp_name_.c_str(), 0);
  temp_name_.clear();
  if (deferred) return Status::Ok();
  if (::fsync(dir_.get()) != 0) return Status::IOError(DirName(path_), errno);
  return Status::Ok();
}

Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode) {
  CAPSULE_ASSIGN_OR_RETURN(AtomicFile file, AtomicFile::Create(path, mode));
  CAPSULE_RETURN_IF_ERROR(file.Append(data));
  return file.Commit();
}

std::string JoinPath(std::string_view a, std::string_view b) {
  if (a.empty() || a == ".") return std::string(b);
  if (b.empty()) return std::string(a);
  std::string out(a);
  if (out.back() != '/') out.push_back('/');
  out.append(b);
  return out;
}

std::string DirName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  if (slash == std::string_view::npos) return ".";
  if (slash == 0) return "/";
  return std::string(path.substr(0, slash));
}

std::string BaseName(std::string_view path) {
  while (path.size() > 1 && path.back() == '/') path.remove_suffix(1);
  size_t slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

namespace {

Status ListInto(int root_fd, const std::string& root, const std::string& rel,
                const std::vector<std::string>& skip, std::vector<TreeEntry>* out) {
  std::string dir_path = rel.empty() ? root : JoinPath(root, rel);
  // Each name is looked up relative to the open folder (no walk from the root a name), and
  // the folder is closed before its subfolders are listed, so one descriptor is open at a time.
  // A subfolder is reached from the root without following a link: one swapped for a link
  // after it was listed fails the listing instead of listing what the link points to.
  std::vector<TreeEntry> entries;
  {
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd opened, OpenBeneathFd(root_fd, rel, O_RDONLY | O_DIRECTORY, 0, dir_path));
    std::unique_ptr<DIR, int (*)(DIR*)> dir(::fdopendir(opened.get()), ::closedir);
    if (dir == nullptr) return Status::IOError(dir_path, errno);
    opened.Release();
    std::vector<std::string> names;
    errno = 0;
    while (struct dirent* ent = ::readdir(dir.get())) {
      std::string name = ent->d_name;
      if (name != "." && name != "..") names.push_back(std::move(name));
      errno = 0;
    }
    if (errno != 0) return Status::IOError(dir_path, errno);
    std::sort(names.begin(), names.end());
    const int dir_fd = ::dirfd(dir.get());
    entries.reserve(names.size());
    for (std::string& name : names) {
      struct stat st;
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        return Status::IOError(JoinPath(dir_path, name), errno);
      }
      TreeEntry entry;
      entry.mode = st.st_mode & 07777;
      entry.format = st.st_mode & S_IFMT;
      entry.rdev = st.st_rdev;
      entry.dev = st.st_dev;
      entry.ino = st.st_ino;
      entry.nlink = st.st_nlink;
      entry.mtime = st.st_mtim;
      entry.ctime = st.st_ctim;
      if (S_ISREG(st.st_mode)) {
        entry.type = TreeEntry::Type::kFile;
        entry.size = static_cast<uint64_t>(st.st_size);
      } else if (S_ISDIR(st.st_mode)) {
        entry.type = TreeEntry::Type::kDirectory;
      } else if (S_ISLNK(st.st_mode)) {
        entry.type = TreeEntry::Type::kSymlink;
        std::string target(static_cast<size_t>(st.st_size) + 1, '\0');
        ssize_t n = ::readlinkat(dir_fd, name.c_str(), target.data(), target.size());
        if (n < 0) return Status::IOError(JoinPath(dir_path, name), errno);
        target.resize(static_cast<size_t>(n));
        entry.link_target = std::move(target);
      }
      entry.path = rel.empty() ? std::move(name) : rel + "/" + name;
      entries.push_back(std::move(entry));
    }
  }
  for (TreeEntry& entry : entries) {
    if (std::find(skip.begin(), skip.end(), entry.path) != skip.end()) continue;
    const bool is_dir = entry.type == TreeEntry::Type::kDirectory;
    std::string child = is_dir ? entry.path : std::string();
    out->push_back(std::move(entry));
    if (is_dir) CAPSULE_RETURN_IF_ERROR(ListInto(root_fd, root, child, skip, out));
  }
  return Status::Ok();
}

}  // namespace

Result<std::vector<std::string>> ListFileNames(const std::string& dir_path, std::vector<std::string>* others) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(dir_path, O_RDONLY | O_DIRECTORY));
  return ListFileNamesAt(std::move(fd), dir_path, others);
}

Result<std::vector<std::string>> ListFileNamesAt(UniqueFd dir_fd, const std::string& dir_path,
                                                 std::vector<std::string>* others) {
  DIR* dir = ::fdopendir(dir_fd.get());
  if (dir == nullptr) return Status::IOError(dir_path, errno);
  dir_fd.Release();
  std::vector<std::string> names;
  errno = 0;
  while (struct dirent* ent = ::readdir(dir)) {
    bool regular = ent->d_type == DT_REG;
    if (ent->d_type == DT_UNKNOWN) {
      struct stat st;
      regular = ::fstatat(::dirfd(dir), ent->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
    }
    if (regular) {
      names.emplace_back(ent->d_name);
    } else if (others != nullptr && std::strcmp(ent->d_name, ".") != 0 && std::strcmp(ent->d_name, "..") != 0) {
      others->emplace_back(ent->d_name);
    }
    errno = 0;
  }
  int read_errno = errno;
  ::closedir(dir);
  if (read_errno != 0) return Status::IOError(dir_path, read_errno);
  std::sort(names.begin(), names.end());
  if (others != nullptr) std::sort(others->begin(), others->end());
  return names;
}

Result<std::vector<TreeEntry>> ListTree(const std::string& root,
                                        const std::vector<std::string>& skip) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd root_fd, OpenFile(root, O_RDONLY | O_DIRECTORY));
  return ListTreeAt(root_fd.get(), root, skip);
}

Result<std::vector<TreeEntry>> ListTreeAt(int root_fd, const std::string& root,
                                          const std::vector<std::string>& skip) {
  std::vector<TreeEntry> entries;
  CAPSULE_RETURN_IF_ERROR(ListInto(root_fd, root, "", skip, &entries));
  // Depth-first listing is not byte order ("a/b" < "a.txt" differs); sort once at the end.
  std::sort(entries.begin(), entries.end(),
            [](const TreeEntry& x, const TreeEntry& y) { return x.path < y.path; });
  return entries;
}

Status RemoveTree(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::Ok();
    return Status::IOError(path, errno);
  }
  if (S_ISDIR(st.st_mode)) {
    DIR* dir = ::opendir(path.c_str());
    if (dir == nullptr) return Status::IOError(path, errno);
    std::vector<std::string> names;
    while (struct dirent* ent = ::readdir(dir)) {
      std::string name = ent->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(dir);
    for (const std::string& name : names) CAPSULE_RETURN_IF_ERROR(RemoveTree(JoinPath(path, name)));
    if (::rmdir(path.c_str()) != 0) return Status::IOError(path, errno);
    return Status::Ok();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Status::IOError(path, errno);
  return Status::Ok();
}

bool PathExists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

std::string RealPath(const std::string& path) {
  char* real = ::realpath(path.c_str(), nullptr);
  if (real == nullptr) return "";
  std::string result(real);
  std::free(real);
  return result;
}

// ---- Bounded reads: what a user hands a command ----

namespace {

std::string FileKind(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a folder";
  return "not a file";
}

Status TooLarge(const std::string& name, uint64_t max, std::string_view what) {
  return Status::InvalidArgument(name, "larger than " + std::string(what) + " may be: at most " + DescribeBytes(max) +
                                           " (" + std::to_string(max) + " bytes)");
}

// Appends what `fd` gives to `out` until its end; refused once `out` would pass `max`.
Status ReadBoundedInto(int fd, const std::string& name, uint64_t max, std::string_view what, std::string* out) {
  constexpr size_t kPiece = 64 << 10;
  for (;;) {
    // At most one byte past the limit is asked for: enough to know it was passed.
    uint64_t room = max + 1 - std::min<uint64_t>(out->size(), max + 1);
    if (room == 0) return TooLarge(name, max, what);
    size_t want = static_cast<size_t>(std::min<uint64_t>(room, kPiece));
    size_t used = out->size();
    out->resize(used + want);
    ssize_t n = ::read(fd, out->data() + used, want);
    if (n < 0) {
      out->resize(used);
      if (errno == EINTR) continue;
      return Status::IOError(name, errno);
    }
    out->resize(used + static_cast<size_t>(n));
    if (n == 0) return Status::Ok();
  }
}

}  // namespace

std::string DescribeBytes(uint64_t bytes) {
  for (auto [unit, name] : {std::pair<uint64_t, const char*>{uint64_t{1} << 30, "GiB"}, {uint64_t{1} << 20, "MiB"},
                            {uint64_t{1} << 10, "KiB"}}) {
    if (bytes >= unit && bytes % unit == 0) return std::to_string(bytes / unit) + " " + name;
  }
  return std::to_string(bytes) + " bytes";
}

Result<std::string> ReadFileBounded(const std::string& path, uint64_t max, std::string_view what) {
  // O_NONBLOCK: a FIFO is refused below instead of waiting here for a writer.
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK));
  return ReadFileBoundedFd(fd.get(), path, max, what);
}

Result<std::string> ReadFileBoundedFd(int fd, const std::string& path, uint64_t max, std::string_view what) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path, "not a regular file (" + FileKind(st.st_mode) + "): " + std::string(what) +
                                             " is read from a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max) return TooLarge(path, max, what);
  std::string data;
  data.reserve(static_cast<size_t>(st.st_size) + 1);
  CAPSULE_RETURN_IF_ERROR(ReadBoundedInto(fd, path, max, what, &data));  // it may grow meanwhile
  return data;
}

Result<std::string> ReadStreamBounded(int fd, const std::string& name, uint64_t max, std::string_view what) {
  std::string data;
  CAPSULE_RETURN_IF_ERROR(ReadBoundedInto(fd, name, max, what, &data));
  return data;
}

}  // namespace capsule
