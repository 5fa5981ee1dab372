#include "capsule/format/workspace_times.h"

#include <cstdint>

#include "capsule/base/file_io.h"

namespace capsule {

Json WorkspaceTimesJson(const WorkspaceTimes& times) {
  Json json = Json::object();
  for (const auto& [path, time] : times) {
    json[path] = Json::array({static_cast<int64_t>(time.tv_sec), static_cast<int64_t>(time.tv_nsec)});
  }
  return json;
}

void ParseWorkspaceTimes(const Json& json, WorkspaceTimes* times) {
  if (!json.is_object()) return;
  for (const auto& [path, value] : json.items()) {
    if (!value.is_array() || value.size() != 2 || !value[0].is_number_integer() || !value[1].is_number_integer()) {
      continue;
    }
    int64_t nsec = value[1].get<int64_t>();
    if (nsec < 0 || nsec >= 1000000000) continue;
    (*times)[path] = timespec{static_cast<time_t>(value[0].get<int64_t>()), static_cast<long>(nsec)};
  }
}

namespace {

WorkspaceTimes ParseTimesText(const Result<std::string>& text, const std::string& path) {
  WorkspaceTimes times;
  if (!text.ok()) return times;
  Result<Json> json = ParseJson(*text, path, Code::kCorruption);
  if (json.ok()) ParseWorkspaceTimes(*json, &times);
  return times;
}

}  // namespace

WorkspaceTimes LoadWorkspaceTimes(const std::string& path) { return ParseTimesText(ReadFile(path), path); }

WorkspaceTimes LoadWorkspaceTimes(const DirFd& folder, const std::string& rel) {
  return ParseTimesText(folder.ReadFile(rel), folder.PathOf(rel));
}

Result<std::string> WorkspaceTimesText(const WorkspaceTimes& times) {
  CanonicalWriter out;
  out.Raw("{");
  bool first = true;
  for (const auto& [path, time] : times) {
    if (!first) out.Raw(",");
    first = false;
    out.String(path);
    out.Raw(":[");
    out.Signed(static_cast<int64_t>(time.tv_sec));
    out.Raw(",");
    out.Signed(static_cast<int64_t>(time.tv_nsec));
    out.Raw("]");
  }
  out.Raw("}");
  if (out.ok()) return out.Take();
  return CanonicalJson(WorkspaceTimesJson(times), "workspace times");  // a name that needs escaping
}

Status SaveWorkspaceTimes(const std::string& path, const WorkspaceTimes& times) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, WorkspaceTimesText(times));
  return WriteFileAtomic(path, text);
}

}  // namespace capsule
