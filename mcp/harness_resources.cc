#include "mcp/harness_resources.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include "capsule/base/file_io.h"
#include "capsule/format/harness.h"
#include "mcp/reply_bounds.h"
#include "mcp/resources.h"

namespace capsule::mcp {

namespace {

constexpr uint64_t kMaxHarnessFile = uint64_t{16} << 20;
constexpr char kInstructions[] = "instructions";
constexpr char kSkills[] = "skills/";

bool IsUtf8(const std::string& text) {
  try {
    (void)Json(text).dump();
    return true;
  } catch (const Json::exception&) {
    return false;
  }
}

// A plain relative path inside a skill's folder: no empty, "." or ".." part, nothing hidden.
bool IsPlainPath(const std::string& path) {
  if (path.empty() || path.size() > 1024) return false;
  size_t start = 0;
  for (;;) {
    const size_t slash = path.find('/', start);
    const std::string part = path.substr(start, slash == std::string::npos ? std::string::npos : slash - start);
    if (part.empty() || part[0] == '.') return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

}  // namespace

Result<std::string> ReadBeneath(const std::string& root, const std::string& rel) {
  Result<UniqueFd> fd = OpenBeneath(root, rel, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (!fd.ok()) {
    if (fd.status().sys_errno() == ENOENT || fd.status().sys_errno() == ENOTDIR) {
      return Status::NotFound(rel, "no such file");
    }
    return fd.status();
  }
  struct stat st {};
  if (::fstat(fd->get(), &st) != 0) return Status::IOError(rel, errno);
  if (!S_ISREG(st.st_mode)) return Status::NotFound(rel, "not a regular file");
  if (static_cast<uint64_t>(st.st_size) > kMaxHarnessFile) {
    return Status::InvalidArgument(rel, "larger than a harness file served here may be (16 MiB)");
  }
  return ReadAll(FileReadAt(fd->get(), JoinPath(root, rel)));
}

void ListHarness(const std::string& root, const std::string& base, Json& resources) {
  if (ReadBeneath(root, kInstructionsPath).ok()) {
    resources.push_back({{"uri", base + kInstructions},
                         {"name", "instructions"},
                         {"title", "The agent's standing instructions"},
                         {"description", "harness/instructions.md: the instructions that open the agent's system text"},
                         {"mimeType", "text/markdown"}});
  }
  // The skills' folders, and each one's SKILL.md read as ReadHarness reads it (no link followed).
  const std::string skills_dir = JoinPath(root, kSkillsDir);
  if (!PathExists(skills_dir)) return;
  Result<std::vector<TreeEntry>> tree = ListTree(skills_dir);
  if (!tree.ok()) return;
  for (const TreeEntry& entry : *tree) {
    if (entry.type != TreeEntry::Type::kDirectory || entry.path.find('/') != std::string::npos) continue;
    const std::string rel = std::string(kSkillsDir) + "/" + entry.path + "/" + kSkillFileName;
    Result<std::string> text = ReadBeneath(root, rel);
    if (!text.ok()) continue;
    Result<Skill> skill = ParseSkill(rel, *text);
    if (!skill.ok()) continue;  // capsule verify names it
    resources.push_back({{"uri", base + kSkills + skill->name},
                         {"name", "skill " + skill->name},
                         {"title", "Skill " + skill->name},
                         {"description", skill->description},
                         {"mimeType", "text/markdown"}});
  }
}

std::optional<Result<Json>> ReadHarness(const std::string& root, const std::string& uri, const std::string& path,
                                        const std::string& query) {
  std::string rel;
  if (path == kInstructions) {
    rel = kInstructionsPath;
  } else if (path.compare(0, std::string(kSkills).size(), kSkills) == 0) {
    std::optional<std::string> inside = PercentDecode(path.substr(std::string(kSkills).size()));
    if (!inside || !IsPlainPath(*inside)) {
      return Status::NotFound("resource " + Excerpt(uri), "not a skill's URI (skills/NAME or skills/NAME/FILE)");
    }
    // A skill alone is its SKILL.md.
    rel = std::string(kSkillsDir) + "/" + *inside + (inside->find('/') == std::string::npos ? "/" + std::string(kSkillFileName) : "");
  } else {
    return std::nullopt;
  }
  Result<std::string> text = ReadBeneath(root, rel);
  if (!text.ok()) {
    if (text.status().code() == Code::kNotFound) return Status::NotFound("resource " + Excerpt(uri), rel + ": none here");
    // A link on the way, a file too large: nothing this URI can give.
    return Status::NotFound("resource " + Excerpt(uri), text.status().message());
  }
  if (!IsUtf8(*text)) {
    return Status::NotFound("resource " + Excerpt(uri), rel + " is not UTF-8 text; read it from the capsule folder");
  }
  const bool markdown = rel.size() >= 3 && rel.compare(rel.size() - 3, 3, ".md") == 0;
  return TextPart(uri, markdown ? "text/markdown" : "text/plain", *text, query);
}

}  // namespace capsule::mcp
