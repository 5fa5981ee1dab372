#include "capsule/format/documents.h"

#include "capsule/format/environment_spec.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"
#include "capsule/format/schedule.h"

namespace capsule {

namespace {

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool IsSkillFile(const std::string& path) {
  // harness/skills/<name>/SKILL.md
  std::string prefix = std::string(kSkillsDir) + "/";
  if (!StartsWith(path, prefix)) return false;
  std::string rest = path.substr(prefix.size());
  size_t slash = rest.find('/');
  return slash != std::string::npos && rest.substr(slash + 1) == kSkillFileName;
}

}  // namespace

bool IsCheckedWhenWritten(const std::string& path) {
  return path == kEnvironmentSpecPath || IsSchedulePath(path) || StartsWith(path, std::string(kThreadsDir) + "/");
}

bool IsCheckedDocument(const std::string& path) { return IsCheckedWhenWritten(path) || IsSkillFile(path); }

Status CheckDocument(const std::string& path, std::string_view text) {
  if (path == kEnvironmentSpecPath) return CheckEnvironmentSpec(text);
  // An empty job or thread file is one created and never written (as a refused first write
  // through a mount leaves it): it counts as absent.
  if (text.empty()) return Status::Ok();
  if (IsSchedulePath(path)) return CheckScheduleFile(path, text);
  if (StartsWith(path, std::string(kThreadsDir) + "/")) return ParseThread(path, text).status();
  if (IsSkillFile(path)) return ParseSkill(path, text).status();
  return Status::Ok();
}

Status CheckWrittenDocument(const std::string& path, std::string_view text) {
  if (text.empty() && path != kEnvironmentSpecPath) {
    return Status::InvalidArgument(path, "empty: write the whole document, or remove the file");
  }
  return CheckDocument(path, text);
}

}  // namespace capsule
