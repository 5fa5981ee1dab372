// File I/O for capsulefs: an owned file descriptor, whole-file reads, and the one
// durable-write path that every file the project writes goes through.
//
// The durable-write path: write into a temporary file beside the target, fsync it, rename it
// over the target, fsync the folder. A crash at any point leaves the target with its old
// content or its new content, never a mix, and never a half-written file under its name.
//
// Thread-safety: UniqueFd and AtomicFile are single-owner objects; the free functions are safe
// to call from any thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"

namespace capsule {

// Owns a file descriptor and closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { Reset(); }
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.Release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) Reset(other.Release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int Release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void Reset(int fd = -1);

 private:
  int fd_ = -1;
};

std::string BaseName(std::string_view path);

// Opens `path` with open(2) flags; an I/O error names the path.
Result<UniqueFd> OpenFile(const std::string& path, int flags, mode_t mode = 0);

// Opens `rel`, a plain relative path, beneath the folder `root` without following any link on
// the way (openat2 with RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS): a link anywhere in `rel`,
// even one put there after the caller looked, makes it fail (ELOOP or EXDEV) instead of
// reaching outside. Links are data to us; nothing we read or write goes through one.
Result<UniqueFd> OpenBeneath(const std::string& root, const std::string& rel, int flags, mode_t mode = 0);
// The same beneath the folder held open as `dir_fd` ("" opens that folder again); errors name
// `shown`, the full path. See DirFd (dir_fd.h) for a held folder and the rest of its calls.
Result<UniqueFd> OpenBeneathFd(int dir_fd, const std::string& rel, int flags, mode_t mode, const std::string& shown);

// Writes all of `data` to `fd`, retrying short writes and EINTR.
Status WriteAll(int fd, std::string_view data, const std::string& name);
// The same for `pieces` one after another, many to a writev(2).
Status WriteAll(int fd, std::span<const std::string_view> pieces, const std::string& name);
// Reads up to `size` bytes at `offset`; fewer only at end of file.
Result<size_t> ReadAt(int fd, char* buffer, size_t size, off_t offset, const std::string& name);

Result<std::string> ReadFile(const std::string& path);
// Everything the open file `fd` gives from its offset to its end; errors name `name`.
Result<std::string> ReadFd(int fd, const std::string& name);
// The folder `root` as given (a link there is followed, like any path a user names), then
// `rel` beneath it without following any link (OpenBeneathFd, O_NOFOLLOW): for a file inside
// a capsule folder read by a tool that holds no folder open. A missing `root` is named as the
// missing `root`/`rel`, as a read by path would name it.
Result<UniqueFd> OpenBeneathGiven(const std::string& root, const std::string& rel, int flags, mode_t mode = 0);
Result<std::string> ReadFileBeneath(const std::string& root, const std::string& rel);

// Reads up to `size` bytes at `offset` into `buffer`: how many were read, fewer only at the
// end. For checks that read a large file a block at a time, and read it again whole only in
// the rare case they need to.
using ReadAtFunction = std::function<Result<size_t>(uint64_t offset, char* buffer, size_t size)>;
// A ReadAtFunction over `fd` (kept open by the caller), errors naming `name`.
ReadAtFunction FileReadAt(int fd, std::string name);
// A ReadAtFunction over `text` (kept alive by the caller).
ReadAtFunction TextReadAt(std::string_view text);
// Everything `read` gives, from offset `from` to its end.
Result<std::string> ReadAll(const ReadAtFunction& read, uint64_t from = 0);
// What `read` gives from offset `from` up to `to` (or its end, if sooner), given to `consume`
// a piece of at most 1 MiB at a time, in one buffer: how many bytes there were.
Result<uint64_t> ReadPieces(const ReadAtFunction& read, uint64_t from, uint64_t to,
                            const std::function<void(std::string_view)>& consume);

// A file's bytes read whole into memory of their own: anonymous pages, huge ones where the
// kernel allows. For files of hundreds of megabytes read whole, where a fresh string's zeroing
// and its fault per 4 KiB page cost more than the read itself. Unlike a mapping of the file,
// what was read stays as it was read when a writer cuts the file short.
class FileBytes {
 public:
  // Reads `fd` from offset 0 to its end (a file that grows meanwhile is read on).
  static Result<FileBytes> Read(int fd, const std::string& name);
  static Result<FileBytes> Read(const std::string& path);

  FileBytes() = default;
  FileBytes(FileBytes&& other) noexcept { *this = std::move(other); }
  FileBytes& operator=(FileBytes&& other) noexcept;
  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  std::string_view view() const { return {data_, size_}; }

 private:
  // Room for `capacity` bytes, keeping the first `size_`.
  Status Reserve(size_t capacity, const std::string& name);
  char* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

// fsync(2) of the folder itself, so that a rename or create inside it is durable.
Status SyncDirectory(const std::string& dir);

// Creates `path` and any missing parents (mode 0755). Existing folders are fine.
Status MakeDirectories(const std::string& path);

// A file being written through the durable-write path. Bytes go to a temporary file beside
// `path`; Commit() makes them the content of `path` in one step. Destroyed uncommitted, it
// removes the temporary file and leaves `path` untouched.
class AtomicFile {
 public:
  static Result<AtomicFile> Create(const std::string& path, mode_t mode = 0644);
  // The same in the folder `dir`, held open (its path `dir_path` for messages): the temporary
  // is made, renamed and removed relative to `dir`, so a link put where the folder was named
  // is never followed (see DirFd::CreateAtomic).
  static Result<AtomicFile> CreateIn(UniqueFd dir, const std::string& dir_path, const std::string& name,
                                     mode_t mode);

  AtomicFile(AtomicFile&& other) noexcept;
  AtomicFile& operator=(AtomicFile&&) = delete;
  AtomicFile(const AtomicFile&) = delete;
  ~AtomicFile();

  Status Append(std::string_view data);
  Status Append(std::span<const std::string_view> pieces);
  // fsync, rename over the target, fsync the folder. The object is spent afterwards.
  Status Commit();
  // Like Commit, but refuses (AlreadyExists) when the target exists: link(2), not rename(2).
  Status CommitNoReplace();
  // Names a different target in the same folder (for content-addressed files, whose name is
  // known only once every byte was written).
  void Retarget(std::string path) {
    name_ = BaseName(path);
    path_ = std::move(path);
  }
  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }

 private:
  AtomicFile(UniqueFd dir, std::string path, std::string temp_name, UniqueFd fd)
      : dir_(std::move(dir)),
        path_(std::move(path)),
        name_(BaseName(path_)),
        temp_name_(std::move(temp_name)),
        fd_(std::move(fd)) {}

  UniqueFd dir_;           // the folder holding the target and the temporary
  std::string path_;       // the target's full path, for messages
  std::string name_;       // the target's name in dir_
  std::string temp_name_;  // the temporary's name in dir_; empty once committed or moved from
  UniqueFd fd_;
};

// Which file a path names, as lstat(2) sees it: a file rewritten through the durable-write
// path (a new file renamed over the old) gets another inode and change time.
struct FileStamp {
  uint64_t device = 0;
  uint64_t inode = 0;
  uint64_t size = 0;
  int64_t change_ns = 0;  // ctime in nanoseconds
  bool operator==(const FileStamp&) const = default;
};
Result<FileStamp> StampOf(const std::string& path);

// Durability for a whole staging folder at once. While a StagingSync is alive on this thread,
// AtomicFile commits inside its folder still write a temporary and rename it, but leave the
// fsyncs to Finish(), which syncs the file system holding the folder once. Safe because the
// staging folder itself is the temporary: it is placed by one rename only after Finish().
class StagingSync {
 public:
  explicit StagingSync(std::string folder);
  ~StagingSync();
  StagingSync(const StagingSync&) = delete;
  StagingSync& operator=(const StagingSync&) = delete;
  // syncfs(2) of the staging folder's file system.
  Status Finish();
  // True when `path` lies inside a folder of a live StagingSync on this thread.
  static bool Covers(const std::string& path);

 private:
  std::string folder_;
  StagingSync* outer_;
};

// The whole durable-write path in one call.
Status WriteFileAtomic(const std::string& path, std::string_view data, mode_t mode = 0644);

// Path helpers on '/'-separated strings.
std::string JoinPath(std::string_view a, std::string_view b);
std::string DirName(std::string_view path);
// realpath(3) of `path`: absolute, no link, no "." or ".."; empty when it cannot be resolved.
std::string RealPath(const std::string& path);
std::string BaseName(std::string_view path);

// One entry of a folder tree, named by its path relative to the root.
struct TreeEntry {
  enum class Type { kFile, kDirectory, kSymlink, kOther };
  std::string path;
  Type type = Type::kOther;
  uint64_t size = 0;
  mode_t mode = 0;          // permission bits
  std::string link_target;  // for kSymlink
  // From lstat(2): kOther's S_IF* bits and device number, the inode (hard links share it),
  // the modification and change times.
  mode_t format = 0;
  uint64_t rdev = 0, dev = 0, ino = 0, nlink = 1;
  struct timespec mtime {}, ctime{};
};

// The names of the regular files directly in `dir`, sorted: from readdir(3)'s entry types,
// with an lstat(2) only where the file system gives none. For large flat folders (the blobs)
// where ListTree's lstat of every entry is the cost. The names of other entries (folders,
// links, ...) go to `others` when given, sorted.
Result<std::vector<std::string>> ListFileNames(const std::string& dir, std::vector<std::string>* others = nullptr);
// The same for the folder open as `dir_fd` (taken over and closed), named `dir` in errors.
Result<std::vector<std::string>> ListFileNamesAt(UniqueFd dir_fd, const std::string& dir,
                                                 std::vector<std::string>* others = nullptr);

// Every entry under `root`, sorted by path (byte order), without following links. Folders
// whose relative path is in `skip` are left out with everything under them.
Result<std::vector<TreeEntry>> ListTree(const std::string& root,
                                        const std::vector<std::string>& skip = {});
// The same for the folder held open as `root_fd` (named `root` in errors).
Result<std::vector<TreeEntry>> ListTreeAt(int root_fd, const std::string& root,
                                          const std::vector<std::string>& skip = {});

// Removes `path` and everything under it; a missing path is fine.
Status RemoveTree(const std::string& path);

bool PathExists(const std::string& path);

// ---- Bounded reads: what a user hands a command ----
// Every file or stream a command reads whole from outside (a key, a query, a have, an
// attachment, an event's data) has a largest size for its kind, checked WHILE reading: an
// endless input (/dev/zero, a pipe that never ends) is refused after that many bytes instead
// of filling memory, and where a file is expected anything but a regular file is refused
// before a byte is read. `what` names the input's kind with its article ("a private key",
// "an attachment"), which each message gives with the limit.

// "64 KiB", "1 MiB", "1 GiB", "1000 bytes": a size in words.
std::string DescribeBytes(uint64_t bytes);

// The regular file at `path`, read whole. InvalidArgument naming `path` for anything else (a
// character device, a FIFO, a folder: "not a regular file (a character device): <what> is
// read from a regular file") and for more than `max` bytes, counted as read ("larger than
// <what> may be: at most 64 KiB (65536 bytes)"). Opened without waiting for a FIFO's writer.
Result<std::string> ReadFileBounded(const std::string& path, uint64_t max, std::string_view what);
// The same for the file open as `fd` (its offset at the start), named `path` in errors.
Result<std::string> ReadFileBoundedFd(int fd, const std::string& path, uint64_t max, std::string_view what);

// Everything `fd` gives to its end (standard input, a pipe, a file), named `name` in errors
// ("standard input"), refused with the same words as ReadFileBounded past `max` bytes.
Result<std::string> ReadStreamBounded(int fd, const std::string& name, uint64_t max, std::string_view what);

}  // namespace capsule
