#include "capsule/format/workspace_inodes.h"

#include <vector>

#include "capsule/base/canonical_json.h"

namespace capsule {
namespace {

std::vector<int64_t> Numbers(const InodeRecord& record) {
  std::vector<int64_t> numbers = {static_cast<int64_t>(record.ino), static_cast<int64_t>(record.ctime.tv_sec),
                                  static_cast<int64_t>(record.ctime.tv_nsec),
                                  record.atime ? static_cast<int64_t>(record.atime->tv_sec) : -1,
                                  record.atime ? static_cast<int64_t>(record.atime->tv_nsec) : 0};
  if (record.mtime) {
    numbers.push_back(static_cast<int64_t>(record.mtime->tv_sec));
    numbers.push_back(static_cast<int64_t>(record.mtime->tv_nsec));
  }
  return numbers;
}

std::optional<struct timespec> TimeAt(const Json& value, size_t at) {
  if (!value[at].is_number_integer() || !value[at + 1].is_number_integer()) return std::nullopt;
  int64_t sec = value[at].get<int64_t>(), nsec = value[at + 1].get<int64_t>();
  if (sec < 0 || nsec < 0 || nsec >= 1000000000) return std::nullopt;
  return timespec{static_cast<time_t>(sec), static_cast<long>(nsec)};
}

}  // namespace

WorkspaceInodes LoadWorkspaceInodes(const DirFd& folder, const std::string& rel) {
  WorkspaceInodes inodes;
  Result<std::string> text = folder.ReadFile(rel);
  if (!text.ok()) return inodes;
  Result<Json> json = ParseJson(*text, folder.PathOf(rel), Code::kCorruption);
  if (!json.ok() || !json->is_object()) return inodes;
  for (const auto& [path, value] : json->items()) {
    if (!value.is_array() || (value.size() != 5 && value.size() != 7)) continue;  // another shape: skipped
    if (!value[0].is_number_unsigned() || value[0].get<uint64_t>() < 2) continue;
    InodeRecord record;
    record.ino = value[0].get<uint64_t>();
    std::optional<struct timespec> ctime = TimeAt(value, 1);
    if (!ctime) continue;
    record.ctime = *ctime;
    record.atime = TimeAt(value, 3);
    if (value.size() == 7) record.mtime = TimeAt(value, 5);
    inodes.emplace(path, record);
  }
  return inodes;
}

Result<std::string> WorkspaceInodesText(const WorkspaceInodes& inodes) {
  CanonicalWriter out;
  out.Reserve(inodes.size() * 64);
  out.Raw("{");
  bool first = true;
  for (const auto& [path, record] : inodes) {
    if (!first) out.Raw(",");
    first = false;
    out.String(path);
    out.Raw(":[");
    bool first_number = true;
    for (int64_t n : Numbers(record)) {
      if (!first_number) out.Raw(",");
      first_number = false;
      out.Signed(n);
    }
    out.Raw("]");
  }
  out.Raw("}");
  if (out.ok()) return out.Take();
  Json json = Json::object();  // a name that needs escaping
  for (const auto& [path, record] : inodes) json[path] = Numbers(record);
  return CanonicalJson(json, "workspace inodes");
}

}  // namespace capsule
