// What the agent is besides its memory: its standing instructions, its skills and the data of
// its conversations (threads), under harness/ as plain files a person edits with any editor.
// man/capsule.5 (HARNESS) describes the same layout.
//
//   harness/instructions.md              the agent's standing instructions (Markdown)
//   harness/skills/<name>/SKILL.md       a skill: front matter (name, description), then its body
//   harness/skills/<name>/...            any files the skill needs
//   harness/threads/<thread>.json        a conversation's data kept apart from its events:
//                                        {"tools": [NAME, ...]} narrows the declared tools
//
// Every file is digested in the manifest like any other; a receiver of a Move Stream replaces
// them whole (capsule-move(5)).
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"

namespace capsule {

inline constexpr char kHarnessDir[] = "harness";
inline constexpr char kInstructionsPath[] = "harness/instructions.md";
inline constexpr char kSkillsDir[] = "harness/skills";
inline constexpr char kSkillFileName[] = "SKILL.md";
inline constexpr char kThreadsDir[] = "harness/threads";

// True for the capsule paths a stream carries as harness/ and a receiver replaces whole:
// harness/instructions.md, anything under harness/skills/ and harness/threads/.
bool IsHarnessPath(std::string_view path);

struct Skill {
  std::string name;         // from the front matter; equals its folder's name
  std::string description;  // from the front matter
  std::string path;         // harness/skills/<name>/SKILL.md
};

// The front matter of a SKILL.md: the text opens with a line "---", then "key: value" lines,
// then a line "---"; name ([a-z0-9-], 1 to 64, its folder's name) and description (not empty,
// at most 1024 bytes) are required. A value may be quoted with " or '. InvalidArgument naming
// `path` and the fault otherwise.
Result<Skill> ParseSkill(const std::string& path, std::string_view text);

// The instructions without trailing white space, or empty when the capsule has none.
Result<std::string> LoadInstructions(const std::string& capsule_dir);

// Every skill of the capsule, by name. A skill folder without SKILL.md, or whose front matter
// is bad, is an InvalidArgument naming it.
Result<std::vector<Skill>> LoadSkills(const std::string& capsule_dir);

// A thread's data: harness/threads/<thread>.json, a JSON object; "tools", when present, is an
// array of distinct non-empty tool names, the only tools its conversation may use.
struct Thread {
  std::string name;
  std::optional<std::set<std::string>> tools;  // nullopt: every declared tool
};

// Thread names (the file's stem) are 1 to 128 of [A-Za-z0-9._-], not starting with '.'.
Status CheckThreadName(const std::string& name);
// The check of a thread file's path alone: harness/threads/<thread>.json with a name
// CheckThreadName takes (what the mount asks when such a file is created).
Status CheckThreadPath(const std::string& path);
// The check of a thread file's path (CheckThreadPath) and text.
Result<Thread> ParseThread(const std::string& path, std::string_view text);
// The thread file of `name`, or nullopt when it has none.
Result<std::optional<Thread>> LoadThread(const std::string& capsule_dir, const std::string& name);
// Every thread file of the capsule.
Result<std::vector<Thread>> LoadThreads(const std::string& capsule_dir);
// The canonical text of a thread file.
Result<std::string> ThreadText(const Thread& thread);

}  // namespace capsule
