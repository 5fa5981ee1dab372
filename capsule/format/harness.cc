#include "capsule/format/harness.h"

#include <algorithm>
#include <map>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

bool StartsWith(std::string_view s, std::string_view prefix) { return s.substr(0, prefix.size()) == prefix; }

std::string Trim(std::string_view s) {
  size_t begin = s.find_first_not_of(" \t\r");
  if (begin == std::string_view::npos) return "";
  size_t end = s.find_last_not_of(" \t\r");
  return std::string(s.substr(begin, end - begin + 1));
}

// A front-matter value: quotes taken off a quoted one.
std::string Unquote(std::string value) {
  if (value.size() >= 2 && (value.front() == '"' || value.front() == '\'') && value.back() == value.front()) {
    return value.substr(1, value.size() - 2);
  }
  return value;
}

bool IsSkillName(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(),
                     [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'; });
}

// The names of the subfolders of `dir`, sorted; none when it does not exist.
Result<std::vector<std::string>> Subfolders(const std::string& dir, bool folders) {
  std::vector<std::string> names;
  if (!PathExists(dir)) return names;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<TreeEntry> tree, ListTree(dir));
  for (const TreeEntry& entry : tree) {
    if (entry.path.find('/') != std::string::npos || IsTempDebris(entry.path)) continue;
    bool is_folder = entry.type == TreeEntry::Type::kDirectory;
    if (is_folder == folders) names.push_back(entry.path);
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

bool IsHarnessPath(std::string_view path) {
  return path == kInstructionsPath || StartsWith(path, std::string(kSkillsDir) + "/") ||
         StartsWith(path, std::string(kThreadsDir) + "/");
}

Result<Skill> ParseSkill(const std::string& path, std::string_view text) {
  const std::string what = path + ": front matter";
  // The first line must be "---".
  size_t first_end = text.find('\n');
  if (first_end == std::string_view::npos || Trim(text.substr(0, first_end)) != "---") {
    return Status::InvalidArgument(what, "missing (the file must open with a line '---', then name: and description:, then '---')");
  }
  std::map<std::string, std::string> fields;
  size_t pos = first_end + 1;
  bool closed = false;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    std::string_view line = text.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    pos = end == std::string_view::npos ? text.size() : end + 1;
    if (Trim(line) == "---") {
      closed = true;
      break;
    }
    if (Trim(line).empty() || Trim(line)[0] == '#') continue;
    if (line[0] == ' ' || line[0] == '\t') continue;  // a nested or continued value: not ours to read
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) {
      return Status::InvalidArgument(what, "line '" + Trim(line) + "' is not 'key: value'");
    }
    fields[Trim(line.substr(0, colon))] = Unquote(Trim(line.substr(colon + 1)));
  }
  if (!closed) return Status::InvalidArgument(what, "not closed by a line '---'");
  Skill skill;
  skill.path = path;
  auto name = fields.find("name");
  if (name == fields.end() || name->second.empty()) return Status::InvalidArgument(what, "no name");
  skill.name = name->second;
  if (!IsSkillName(skill.name)) {
    return Status::InvalidArgument(what, "name '" + skill.name + "' must be 1 to 64 of a-z, 0-9 and '-'");
  }
  // harness/skills/<folder>/SKILL.md: the name is the folder's.
  std::string folder = BaseName(DirName(path));
  if (StartsWith(path, std::string(kSkillsDir) + "/") && folder != skill.name) {
    return Status::InvalidArgument(what, "name '" + skill.name + "' is not its folder's name '" + folder + "'");
  }
  auto description = fields.find("description");
  if (description == fields.end() || description->second.empty()) return Status::InvalidArgument(what, "no description");
  if (description->second.size() > 1024) return Status::InvalidArgument(what, "description is over 1024 bytes");
  skill.description = description->second;
  return skill;
}

Result<std::string> LoadInstructions(const std::string& capsule_dir) {
  std::string path = JoinPath(capsule_dir, kInstructionsPath);
  if (!PathExists(path)) return std::string();
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, kInstructionsPath));
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.pop_back();
  return text;
}

Result<std::vector<Skill>> LoadSkills(const std::string& capsule_dir) {
  std::vector<Skill> skills;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> folders, Subfolders(JoinPath(capsule_dir, kSkillsDir), true));
  for (const std::string& folder : folders) {
    std::string rel = std::string(kSkillsDir) + "/" + folder + "/" + kSkillFileName;
    std::string full = JoinPath(capsule_dir, rel);
    if (!PathExists(full)) {
      Result<std::vector<TreeEntry>> inside = ListTree(DirName(full));
      if (inside.ok() && inside->empty()) continue;  // a folder just made: not a skill yet
      return Status::InvalidArgument(rel, "missing: every skill folder holds a SKILL.md");
    }
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, rel));
    CAPSULE_ASSIGN_OR_RETURN(Skill skill, ParseSkill(rel, text));
    skills.push_back(std::move(skill));
  }
  return skills;
}

Status CheckThreadName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') {
    return Status::InvalidArgument("thread '" + name + "'", "a name is 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'");
  }
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
    if (!ok) {
      return Status::InvalidArgument("thread '" + name + "'",
                                     "a name is 1 to 128 of A-Z, a-z, 0-9, '.', '_' and '-', not starting with '.'");
    }
  }
  return Status::Ok();
}

Status CheckThreadPath(const std::string& path) {
  const std::string prefix = std::string(kThreadsDir) + "/";
  std::string file = StartsWith(path, prefix) ? path.substr(prefix.size()) : std::string();
  if (file.size() <= 5 || file.find('/') != std::string::npos || file.substr(file.size() - 5) != ".json") {
    return Status::InvalidArgument(path, "a thread file is harness/threads/<thread>.json");
  }
  return CheckThreadName(file.substr(0, file.size() - 5)).WithContext(path);
}

Result<Thread> ParseThread(const std::string& path, std::string_view text) {
  CAPSULE_RETURN_IF_ERROR(CheckThreadPath(path));
  Thread thread;
  thread.name = path.substr(std::string_view(kThreadsDir).size() + 1, path.size() - std::string_view(kThreadsDir).size() - 6);
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, path));
  if (!json.is_object()) return Status::InvalidArgument(path, "must be a JSON object");
  auto tools = json.find("tools");
  if (tools != json.end()) {
    if (!tools->is_array()) return Status::InvalidArgument(path + ": tools", "must be an array of tool names");
    std::set<std::string> names;
    for (const Json& tool : *tools) {
      if (!tool.is_string() || tool.get<std::string>().empty()) {
        return Status::InvalidArgument(path + ": tools", "each must be a non-empty string");
      }
      if (!names.insert(tool.get<std::string>()).second) {
        return Status::InvalidArgument(path + ": tools", "names '" + tool.get<std::string>() + "' twice");
      }
    }
    thread.tools = std::move(names);
  }
  return thread;
}

Result<std::optional<Thread>> LoadThread(const std::string& capsule_dir, const std::string& name) {
  if (!CheckThreadName(name).ok()) return std::optional<Thread>();  // no file can name it
  std::string rel = std::string(kThreadsDir) + "/" + name + ".json";
  std::string full = JoinPath(capsule_dir, rel);
  if (!PathExists(full)) return std::optional<Thread>();
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, rel));
  if (text.empty()) return std::optional<Thread>();  // created, never written: absent
  CAPSULE_ASSIGN_OR_RETURN(Thread thread, ParseThread(rel, text));
  return std::optional<Thread>(std::move(thread));
}

Result<std::vector<Thread>> LoadThreads(const std::string& capsule_dir) {
  std::vector<Thread> threads;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> files, Subfolders(JoinPath(capsule_dir, kThreadsDir), false));
  for (const std::string& file : files) {
    std::string rel = std::string(kThreadsDir) + "/" + file;
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, rel));
    if (text.empty()) continue;  // created, never written: absent
    CAPSULE_ASSIGN_OR_RETURN(Thread thread, ParseThread(rel, text));
    threads.push_back(std::move(thread));
  }
  return threads;
}

Result<std::string> ThreadText(const Thread& thread) {
  Json json = Json::object();
  if (thread.tools) json["tools"] = Json(std::vector<std::string>(thread.tools->begin(), thread.tools->end()));
  return CanonicalJson(json, std::string(kThreadsDir) + "/" + thread.name + ".json");
}

}  // namespace capsule
