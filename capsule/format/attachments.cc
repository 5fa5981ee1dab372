#include "capsule/format/attachments.h"

#include <fcntl.h>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"

namespace capsule {

namespace {

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool IsUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == 0) return false;
    int extra = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (extra < 0) return false;
    for (int k = 1; k <= extra; ++k) {
      if (i + k >= s.size() || (static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    }
    i += static_cast<size_t>(extra) + 1;
  }
  return true;
}

}  // namespace

bool IsAttachmentsPath(std::string_view path) {
  return path.size() > std::string_view(kAttachmentsDir).size() && StartsWith(path, kAttachmentsDir) &&
         path[std::string_view(kAttachmentsDir).size()] == '/';
}

std::optional<std::string> AttachmentNameProblem(std::string_view path, std::string_view sha256_hex, uint64_t size) {
  const std::string_view name = path.substr(path.rfind('/') + 1);
  if (!IsSha256Hex(name) || path.size() != std::string_view(kAttachmentsDir).size() + 1 + name.size()) {
    return "not an attachment name (64 hex digits of its SHA-256)";
  }
  if (size != 0 && name != sha256_hex) return "attachment digest does not match its name";
  return std::nullopt;
}

Status CheckAttachmentFile(const std::string& file, const std::string& path) {
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(file, O_RDONLY));
  return CheckAttachmentFile(fd.get(), file, path);
}

Status CheckAttachmentFile(int fd, const std::string& file, const std::string& path) {
  uint64_t size = 0;
  CAPSULE_ASSIGN_OR_RETURN(std::string sha, Sha256Fd(fd, file, &size));
  if (std::optional<std::string> problem = AttachmentNameProblem(path, sha, size)) {
    return Status::InvalidArgument(path, *problem);
  }
  return Status::Ok();
}

bool IsAttachmentMediaType(std::string_view media_type) {
  return media_type == "image/png" || media_type == "image/jpeg" || media_type == "image/webp" ||
         media_type == "application/pdf" || media_type == "text/plain";
}

Result<std::string> SniffMediaType(std::string_view bytes, const std::string& what) {
  if (StartsWith(bytes, "\x89PNG\r\n\x1a\n")) return std::string("image/png");
  if (StartsWith(bytes, "\xff\xd8\xff")) return std::string("image/jpeg");
  if (bytes.size() >= 12 && StartsWith(bytes, "RIFF") && bytes.substr(8, 4) == "WEBP") return std::string("image/webp");
  if (StartsWith(bytes, "%PDF-")) return std::string("application/pdf");
  if (IsUtf8(bytes)) return std::string("text/plain");
  return Status::InvalidArgument(what, "not a PNG, JPEG, WebP, PDF or UTF-8 text file");
}

std::string AttachmentPath(const std::string& sha256_hex) { return std::string(kAttachmentsDir) + "/" + sha256_hex; }

Result<std::string> LoadAttachment(const std::string& capsule_dir, const std::string& sha256_hex) {
  std::string rel = AttachmentPath(sha256_hex);
  std::string full = JoinPath(capsule_dir, rel);
  if (!PathExists(full)) return Status::NotFound(rel, "missing: an event names this attachment");
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenBeneathGiven(capsule_dir, rel, O_RDONLY | O_NONBLOCK));
  CAPSULE_ASSIGN_OR_RETURN(std::string bytes, ReadFileBoundedFd(fd.get(), full, kMaxAttachmentBytes, "an attachment"));
  if (Sha256Hex(bytes) != sha256_hex) return Status::Corruption(rel, "content does not match its name");
  return bytes;
}

std::string Base64(std::string_view bytes) {
  static const char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    uint32_t v = (static_cast<unsigned char>(bytes[i]) << 16) | (static_cast<unsigned char>(bytes[i + 1]) << 8) |
                 static_cast<unsigned char>(bytes[i + 2]);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i < bytes.size()) {
    uint32_t v = static_cast<unsigned char>(bytes[i]) << 16;
    if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += i + 1 < bytes.size() ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

}  // namespace capsule
