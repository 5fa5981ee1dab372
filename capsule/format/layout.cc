#include "capsule/format/layout.h"

#include "capsule/base/sha256.h"

namespace capsule {

bool IsPlainRelativePath(std::string_view path) {
  if (path.empty() || path.front() == '/') return false;
  if (path.find('\0') != std::string_view::npos) return false;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string_view::npos) slash = path.size();
    std::string_view part = path.substr(start, slash - start);
    if (part.empty() || part == "." || part == "..") return false;
    start = slash + 1;
  }
  return true;
}

Status CheckPlainRelativePath(std::string_view path, const std::string& what) {
  if (IsPlainRelativePath(path)) return Status::Ok();
  return Status::InvalidArgument(what, "unsafe path '" + std::string(path) +
                                           "' (absolute, empty component, '.' or '..')");
}

std::string BlobPath(const std::string& sha256_hex) {
  return std::string(kBlobsDir) + "/" + sha256_hex;
}

bool IsBlobPath(std::string_view path) {
  std::string_view prefix = "artifacts/blobs/";
  return path.substr(0, prefix.size()) == prefix && IsSha256Hex(path.substr(prefix.size()));
}

bool IsTempDebris(std::string_view path) {
  size_t slash = path.rfind('/');
  std::string_view base = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return base.substr(0, sizeof(kTempPrefix) - 1) == kTempPrefix;
}

bool BelongsInManifest(std::string_view path) {
  return path != kManifestPath && path != kSignaturePath && !IsTempDebris(path);
}

Status CheckAgentId(const std::string& id) {
  if (id.empty() || id.size() > 128) return Status::InvalidArgument("agent id", "must be 1 to 128 characters");
  if (id.front() == '.') return Status::InvalidArgument("agent id '" + id + "'", "must not start with '.'");
  for (char c : id) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    if (!ok) return Status::InvalidArgument("agent id '" + id + "'", "only letters, digits, '.', '_' and '-' are allowed");
  }
  return Status::Ok();
}

}  // namespace capsule
