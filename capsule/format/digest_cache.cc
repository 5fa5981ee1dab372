#include "capsule/format/digest_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <iterator>

#include "capsule/base/sha256.h"

namespace capsule {

Result<DigestCache::Identity> DigestCache::IdentityOf(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::IOError(path, errno);
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
  CAPSULE_ASSIGN_OR_RETURN(Identity before, IdentityOf(path));
  return Sha256FileAs(path, before, size_out);
}

Result<std::string> DigestCache::Sha256File(const std::string& path, const TreeEntry& listed, uint64_t* size_out) {
  return Sha256FileAs(path, IdentityOf(listed), size_out);
}

Result<std::string> DigestCache::Sha256FileAs(const std::string& path, const Identity& before, uint64_t* size_out) {
  {
    std::lock_guard lock(mu_);
    auto found = entries_.find(path);
    if (found != entries_.end() && found->second.identity == before) {
      if (size_out != nullptr) *size_out = before.size;
      return found->second.sha256;
    }
  }
  uint64_t size = 0;
  CAPSULE_ASSIGN_OR_RETURN(std::string sha256, capsule::Sha256File(path, &size));
  if (size_out != nullptr) *size_out = size;
  // Remembered only when nothing touched the file while it was read.
  Result<Identity> after = IdentityOf(path);
  std::lock_guard lock(mu_);
  ++files_read_;
  if (after.ok() && *after == before && size == before.size) {
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
