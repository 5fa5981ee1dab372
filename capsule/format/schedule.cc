#include "capsule/format/schedule.h"

#include <cctype>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

bool Digits(std::string_view s, size_t at, size_t n) {
  for (size_t i = at; i < at + n; ++i) {
    if (i >= s.size() || !std::isdigit(static_cast<unsigned char>(s[i]))) return false;
  }
  return true;
}

bool IsDay(std::string_view s) {
  return s.size() == 10 && Digits(s, 0, 4) && s[4] == '-' && Digits(s, 5, 2) && s[7] == '-' && Digits(s, 8, 2);
}

bool IsUtcTime(std::string_view s) {
  return s.size() == 20 && IsDay(s.substr(0, 10)) && s[10] == 'T' && Digits(s, 11, 2) && s[13] == ':' &&
         Digits(s, 14, 2) && s[16] == ':' && Digits(s, 17, 2) && s[19] == 'Z';
}

bool IsJobId(const std::string& id) {
  if (id.empty() || id.size() > 128 || id[0] == '.') return false;
  for (char c : id) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  }
  return true;
}

Status CheckJob(const std::string& path, const std::string& id, std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(Json job, ParseJson(text, path));
  if (!job.is_object()) return Status::InvalidArgument(path, "a job must be a JSON object");
  auto field = [&](const char* name) { return job.find(name); };
  auto it = field("id");
  if (it == job.end() || !it->is_string() || it->get<std::string>() != id) {
    return Status::InvalidArgument(path + ": id", "must be the string \"" + id + "\" (the file's name)");
  }
  it = field("prompt");
  if (it == job.end() || !it->is_string() || it->get<std::string>().empty()) {
    return Status::InvalidArgument(path + ": prompt", "must be a non-empty string");
  }
  it = field("at");
  if (it == job.end() || !it->is_string() || !IsUtcTime(it->get<std::string>())) {
    return Status::InvalidArgument(path + ": at", "must be a UTC time, YYYY-MM-DDTHH:MM:SSZ");
  }
  it = field("every");
  if (it != job.end() && (!it->is_number_integer() || it->get<int64_t>() <= 0)) {
    return Status::InvalidArgument(path + ": every", "must be a positive whole number of seconds");
  }
  it = field("conversation");
  if (it != job.end() && (!it->is_string() || it->get<std::string>().empty())) {
    return Status::InvalidArgument(path + ": conversation", "must be a non-empty string");
  }
  return Status::Ok();
}

}  // namespace

bool IsSchedulePath(std::string_view path) { return StartsWith(path, std::string(kScheduleDir) + "/"); }

Status CheckScheduleName(const std::string& path) {
  if (path == kScheduleDayPath || path == kScheduleStatePath) return Status::Ok();
  std::string rest = IsSchedulePath(path) ? path.substr(std::string(kScheduleDir).size() + 1) : std::string();
  size_t slash = rest.find('/');
  std::string place = slash == std::string::npos ? std::string() : rest.substr(0, slash);
  std::string file = slash == std::string::npos ? std::string() : rest.substr(slash + 1);
  bool placed = place == "waiting" || place == "firing" || place == "ending";
  if (!placed || file.size() <= 5 || file.substr(file.size() - 5) != ".json" || !IsJobId(file.substr(0, file.size() - 5))) {
    return Status::InvalidArgument(path, "not a schedule file: schedule/day.json, schedule/state.json or "
                                         "schedule/<waiting|firing|ending>/<id>.json");
  }
  return Status::Ok();
}

Status CheckScheduleFile(const std::string& path, std::string_view text) {
  if (path == kScheduleDayPath) {
    CAPSULE_ASSIGN_OR_RETURN(Json day, ParseJson(text, path));
    if (!day.is_array() || day.size() != 2 || !day[0].is_string() || !IsDay(day[0].get<std::string>()) ||
        !day[1].is_number_integer() || day[1].get<int64_t>() < 0) {
      return Status::InvalidArgument(path, "must be the pair [day, sent]: a day \"YYYY-MM-DD\" and a whole number >= 0");
    }
    return Status::Ok();
  }
  if (path == kScheduleStatePath) {
    CAPSULE_ASSIGN_OR_RETURN(Json state, ParseJson(text, path));
    if (!state.is_object() || !state.contains("paused") || !state["paused"].is_boolean()) {
      return Status::InvalidArgument(path, "must be {\"paused\": true} or {\"paused\": false}");
    }
    return Status::Ok();
  }
  CAPSULE_RETURN_IF_ERROR(CheckScheduleName(path));
  std::string file = path.substr(path.rfind('/') + 1);
  return CheckJob(path, file.substr(0, file.size() - 5), text);
}

Result<ScheduleSummary> LoadScheduleSummary(const std::string& capsule_dir) {
  ScheduleSummary summary;
  std::string dir = JoinPath(capsule_dir, kScheduleDir);
  if (!PathExists(dir)) return summary;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(dir));
  for (const TreeEntry& entry : tree) {
    if (entry.type != TreeEntry::Type::kFile || IsTempDebris(entry.path) || entry.size == 0) continue;
    std::string rel = std::string(kScheduleDir) + "/" + entry.path;
    if (rel == kScheduleDayPath) {
      summary.has_day = true;
    } else if (rel == kScheduleStatePath) {
      CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, rel));
      CAPSULE_RETURN_IF_ERROR(CheckScheduleFile(rel, text));
      summary.paused = ParseJson(text, rel)->value("paused", false);
    } else {
      ++summary.jobs;
    }
  }
  return summary;
}

Status CheckSchedulesMayTravel(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(ScheduleSummary summary, LoadScheduleSummary(capsule_dir));
  if (summary.empty() || summary.paused) return Status::Ok();
  return Status::FailedPrecondition("schedules", "the agent's schedules are running (" + std::to_string(summary.jobs) +
                                                     " job(s)); a switch carries them only while paused: "
                                                     "run 'capsule schedule pause' on the source first");
}

std::string ScheduleStateText(bool paused) { return paused ? "{\"paused\":true}" : "{\"paused\":false}"; }

}  // namespace capsule
