#include "capsule/format/digest_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <iterator>
#include <optional>
#include <vector>

#include "capsule/base/sha256.h"

namespace capsule {

DigestCache::Identity DigestCache::IdentityOf(const struct stat& st) {
  Identity identity;
  identity.device = st.st_dev;
  identity.inode = st.st_ino;
  identity.size = static_cast<uint64_t>(st.st_size);
  identity.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  identity.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1000000000 + st.st_ctim.tv_nsec;
  return identity;
}

DigestCache::Identity DigestCache::IdentityOf(const TreeEntry& listed) {
  Identity identity;
  identity.device = listed.dev;
  identity.inode = listed.ino;
  identity.size = listed.size;
  identity.mtime_ns = static_cast<int64_t>(listed.mtime.tv_sec) * 1000000000 + listed.mtime.tv_nsec;
  identity.ctime_ns = static_cast<int64_t>(listed.ctime.tv_sec) * 1000000000 + listed.ctime.tv_nsec;
  return identity;
}

Result<std::string> DigestCache::Sha256File(const std::string& path, uint64_t* size_out) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
  return Sha256Opened(fd.get(), path, size_out);
}

Result<std::string> DigestCache::Sha256File(const std::string& path, const TreeEntry& listed, uint64_t* size_out) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
  return Sha256Opened(fd.get(), path, listed, size_out);
}

Result<std::string> DigestCache::Sha256Opened(int fd, const std::string& path, uint64_t* size_out) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(path, errno);
  return Sha256FileAs(fd, path, IdentityOf(st), size_out);
}

Result<std::string> DigestCache::Sha256Opened(int fd, const std::string& path, const TreeEntry& listed,
                                              uint64_t* size_out) {
  return Sha256FileAs(fd, path, IdentityOf(listed), size_out);
}

Result<std::string> DigestCache::Sha256FileAs(int fd, const std::string& path, const Identity& before,
                                              uint64_t* size_out) {
  {
    std::lock_guard lock(mu_);
    auto found = entries_.find(path);
    if (found != entries_.end() && found->second.identity == before) {
      if (size_out != nullptr) *size_out = before.size;
      return found->second.sha256;
    }
  }
  uint64_t size = 0;
  CAPSULE_ASSIGN_OR_RETURN(std::string sha256, capsule::Sha256Fd(fd, path, &size));
  if (size_out != nullptr) *size_out = size;
  // Remembered only when nothing touched the file while it was read.
  struct stat st;
  const bool same = ::fstat(fd, &st) == 0 && IdentityOf(st) == before;
  std::lock_guard lock(mu_);
  ++files_read_;
  if (same && size == before.size) {
    entries_[path] = Entry{before, sha256};
  } else {
    entries_.erase(path);
  }
  return sha256;
}

std::optional<DigestCache::Digest> DigestCache::Remembered(const std::string& path) const {
  std::lock_guard lock(mu_);
  auto found = entries_.find(path);
  if (found == entries_.end()) return std::nullopt;
  return Digest{found->second.sha256, found->second.identity.size};
}

Result<std::string> DigestCache::Sha256GrowingFile(const std::string& path, uint64_t prefix_length,
                                                   std::string* prefix_hex, uint64_t* size_out) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY | O_CLOEXEC));
  return Sha256GrowingOpened(fd.get(), path, prefix_length, prefix_hex, size_out);
}

Result<std::string> DigestCache::Sha256GrowingOpened(int fd, const std::string& path, uint64_t prefix_length,
                                                     std::string* prefix_hex, uint64_t* size_out) {
  constexpr uint64_t kTail = 4096;
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::IOError(path, errno);
  std::optional<Grown> before;
  {
    std::lock_guard lock(mu_);
    auto found = grown_.find(path);
    if (found != grown_.end()) before = found->second;
  }
  const bool wants_prefix = prefix_hex != nullptr;
  if (wants_prefix) prefix_hex->clear();
  uint64_t from = 0;
  std::unique_ptr<Sha256> hasher;
  if (before && before->device == st.st_dev && before->inode == st.st_ino &&
      before->size <= static_cast<uint64_t>(st.st_size) && (!wants_prefix || prefix_length >= before->size)) {
    std::string tail(before->tail.size(), '\0');
    Result<size_t> got = ReadAt(fd, tail.data(), tail.size(), static_cast<off_t>(before->size - tail.size()), path);
    if (got.ok() && *got == tail.size() && tail == before->tail) {
      hasher = std::make_unique<Sha256>(*before->state);
      from = before->size;
    }
  }
  if (!hasher) hasher = std::make_unique<Sha256>();
  thread_local std::vector<char> buffer(1 << 20);
  uint64_t total = from;
  auto note_prefix = [&] {
    if (wants_prefix && total == prefix_length) *prefix_hex = Sha256(*hasher).FinishHex();
  };
  note_prefix();
  for (;;) {
    size_t want = buffer.size();
    if (total < prefix_length) want = static_cast<size_t>(std::min<uint64_t>(want, prefix_length - total));
    ssize_t n = ::pread(fd, buffer.data(), want, static_cast<off_t>(total));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(path, errno);
    if (n == 0) break;
    hasher->Update(std::string_view(buffer.data(), static_cast<size_t>(n)));
    total += static_cast<uint64_t>(n);
    note_prefix();
  }
  Grown now;
  now.device = st.st_dev;
  now.inode = st.st_ino;
  now.size = total;
  now.tail.resize(std::min(kTail, total));
  CAPSULE_ASSIGN_OR_RETURN(size_t got, ReadAt(fd, now.tail.data(), now.tail.size(),
                                               static_cast<off_t>(total - now.tail.size()), path));
  now.tail.resize(got);
  now.state = std::make_shared<const Sha256>(*hasher);
  std::string digest = hasher->FinishHex();
  if (size_out != nullptr) *size_out = total;
  std::lock_guard lock(mu_);
  growing_bytes_read_ += total - from;
  // Remembered only at the end of a line: a torn last line is what gets cut (and rewritten),
  // and a cut never goes back past a line's end.
  if (got != std::min(kTail, total)) {
    grown_.erase(path);  // it shrank while read: remember nothing
  } else if (total == 0 || now.tail.back() == '\n') {
    grown_[path] = std::move(now);
  } else if (from == 0) {
    grown_.erase(path);  // ends inside a line, and nothing before was kept
  }  // else: ends inside a line; the state it started from stays

  return digest;
}

uint64_t DigestCache::growing_bytes_read() const {
  std::lock_guard lock(mu_);
  return growing_bytes_read_;
}

void DigestCache::KeepOnly(const std::set<std::string>& paths) {
  std::lock_guard lock(mu_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    it = paths.count(it->first) ? std::next(it) : entries_.erase(it);
  }
}

uint64_t DigestCache::files_read() const {
  std::lock_guard lock(mu_);
  return files_read_;
}

}  // namespace capsule
