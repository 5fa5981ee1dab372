#include "capsule/base/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <vector>

#include "capsule/base/file_io.h"

namespace capsule {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  // Allocation or init failing here means OpenSSL itself is broken; nothing can go on.
  if (!ctx_ || EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) != 1) std::abort();
}

Sha256::Sha256(const Sha256& other) : ctx_(EVP_MD_CTX_new()) {
  if (!ctx_ || EVP_MD_CTX_copy_ex(ctx_.get(), other.ctx_.get()) != 1) std::abort();
}

void Sha256::Update(std::string_view data) {
  if (EVP_DigestUpdate(ctx_.get(), data.data(), data.size()) != 1) std::abort();
}

void Sha256::Reset() {
  if (EVP_DigestInit_ex2(ctx_.get(), nullptr, nullptr) != 1) std::abort();
}

Sha256Digest Sha256::Finish() {
  Sha256Digest digest;
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_.get(), digest.data(), &length) != 1 || length != digest.size()) {
    std::abort();
  }
  return digest;
}

std::string Sha256::FinishHex() { return HexEncode(Finish()); }

std::string Sha256Hex(std::string_view data) {
  Sha256 hasher;
  hasher.Update(data);
  return hasher.FinishHex();
}

Result<std::string> Sha256File(const std::string& path, uint64_t* size_out, Progress* progress) {
  return Sha256FileWithPrefix(path, UINT64_MAX, nullptr, size_out, progress);
}

Result<std::string> Sha256Fd(int fd, const std::string& name, uint64_t* size_out) {
  Sha256 hasher;
  thread_local std::vector<char> buffer(1 << 20);
  uint64_t total = 0;
  for (;;) {
    CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd, buffer.data(), buffer.size(), static_cast<off_t>(total), name));
    if (n == 0) break;
    hasher.Update(std::string_view(buffer.data(), n));
    total += n;
  }
  if (size_out != nullptr) *size_out = total;
  return hasher.FinishHex();
}

Result<std::string> Sha256FileWithPrefix(const std::string& path, uint64_t prefix_length,
                                         std::string* prefix_hex, uint64_t* size_out, Progress* progress) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_RDONLY));
  return Sha256FdWithPrefix(fd.get(), path, prefix_length, prefix_hex, size_out, progress);
}

Result<std::string> Sha256FdWithPrefix(int fd, const std::string& path, uint64_t prefix_length,
                                       std::string* prefix_hex, uint64_t* size_out, Progress* progress) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  Sha256 hasher;
  // One buffer per thread, made once: hashing many small files (a stream of 20,000 of them)
  // must not pay for allocating and zeroing a megabyte each time.
  thread_local std::vector<char> buffer(1 << 20);
  uint64_t total = 0;
  if (prefix_hex != nullptr) prefix_hex->clear();
  auto note_prefix = [&] {
    if (prefix_hex != nullptr && total == prefix_length) {
      Sha256 copy = hasher;
      *prefix_hex = copy.FinishHex();
    }
  };
  note_prefix();
  for (;;) {
    size_t want = buffer.size();
    if (total < prefix_length) want = static_cast<size_t>(std::min<uint64_t>(want, prefix_length - total));
    ssize_t n = ::read(fd, buffer.data(), want);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IOError(path, errno);
    }
    if (n == 0) break;
    hasher.Update(std::string_view(buffer.data(), static_cast<size_t>(n)));
    total += static_cast<uint64_t>(n);
    if (progress != nullptr) progress->Add(static_cast<uint64_t>(n), 0);
    note_prefix();
  }
  if (size_out != nullptr) *size_out = total;
  return hasher.FinishHex();
}

std::string HexEncode(std::string_view bytes) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

namespace {
int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}
}  // namespace

Result<std::string> HexDecode(std::string_view hex, const std::string& what) {
  if (hex.size() % 2 != 0) return Status::InvalidArgument(what, "hex of odd length");
  std::string out;
  out.reserve(hex.size() / 2);
  for (size_t i = 0; i < hex.size(); i += 2) {
    int hi = HexValue(hex[i]);
    int lo = HexValue(hex[i + 1]);
    if (hi < 0 || lo < 0) return Status::InvalidArgument(what, "not hex");
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

Result<std::string> RandomHex(size_t bytes) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile("/dev/urandom", O_RDONLY));
  std::string raw(bytes, '\0');
  CAPSULE_ASSIGN_OR_RETURN(size_t n, ReadAt(fd.get(), raw.data(), bytes, 0, "/dev/urandom"));
  if (n != bytes) return Status::IOError("/dev/urandom", "short read");
  return HexEncode(raw);
}

bool IsSha256Hex(std::string_view text) {
  if (text.size() != 64) return false;
  // Branch-free over the 64 digits: blob names are checked by the ten thousand.
  bool ok = true;
  for (char c : text) ok &= (c >= '0' && c <= '9') | (c >= 'a' && c <= 'f');
  return ok;
}

}  // namespace capsule
