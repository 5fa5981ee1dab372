// Memory blocks: labelled pieces of the agent's memory that open its system text every turn
// (Letta's core memory), one file each under memory/blocks/ (man/capsule.5, MEMORY BLOCKS):
//
//   memory/blocks/<label>.md     front matter, then the block's value byte for byte:
//     ---
//     label: human
//     description: "What I know of the person I talk with"
//     limit: 5000
//     read_only: false
//     ---
//     <value>
//
// The description is written as a JSON string (quotes, escapes); a bare value is read as is.
// limit (characters) is optional; read_only defaults to false.
//
// Thread-safety: pure functions and reads; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "capsule/base/status.h"

namespace capsule {

inline constexpr char kMemoryBlocksDir[] = "memory/blocks";

struct MemoryBlock {
  std::string label;        // 1 to 64 of [A-Za-z0-9_-]: its file's stem
  std::string description;  // may be empty
  std::string value;
  std::optional<uint64_t> limit;
  bool read_only = false;
};

// InvalidArgument naming the label when it is not 1 to 64 of [A-Za-z0-9_-].
Status CheckBlockLabel(const std::string& label);
// memory/blocks/<label>.md
std::string MemoryBlockPath(const std::string& label);
// The file's text for `block`.
std::string MemoryBlockText(const MemoryBlock& block);
// Parses a block file (`path` names it in errors); its label must match its file's stem.
Result<MemoryBlock> ParseMemoryBlock(const std::string& path, std::string_view text);
// Every block of the capsule, by label; none when memory/blocks/ is absent.
Result<std::vector<MemoryBlock>> LoadMemoryBlocks(const std::string& capsule_dir);

// The blocks as Letta puts them in the system text:
//   <memory_blocks>
//   The following memory blocks are currently engaged in your core memory unit:
//
//   <LABEL>
//   <description>
//   DESCRIPTION
//   </description>
//   <metadata>
//   - read_only=true            (only when read-only)
//   - chars_current=N
//   - chars_limit=LIMIT          (only with a limit)
//   </metadata>
//   <value>
//   VALUE
//   </value>
//   </LABEL>
//   (a blank line between blocks)
//   </memory_blocks>
// Empty when there are no blocks.
std::string RenderMemoryBlocks(const std::vector<MemoryBlock>& blocks);

// The system text of instructions with blocks: "{CORE_MEMORY}" in the instructions is replaced
// by the rendered blocks; otherwise they follow the instructions after a blank line.
std::string InstructionsWithBlocks(const std::string& instructions, const std::vector<MemoryBlock>& blocks);

}  // namespace capsule
