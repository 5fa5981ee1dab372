#include "capsule/format/memory_blocks.h"

#include <algorithm>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"

namespace capsule {

namespace {

bool IsLabelChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

// A front matter value: a JSON string when it opens with '"', else the text as is.
Result<std::string> FrontMatterString(const std::string& what, const std::string& raw) {
  if (raw.empty() || raw[0] != '"') return raw;
  CAPSULE_ASSIGN_OR_RETURN(Json parsed, ParseJson(raw, what));
  if (!parsed.is_string()) return Status::InvalidArgument(what, "must be a string");
  return parsed.get<std::string>();
}

// Letta counts characters, not bytes: UTF-8 code points.
uint64_t CharacterCount(const std::string& text) {
  return std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

}  // namespace

Status CheckBlockLabel(const std::string& label) {
  if (label.empty() || label.size() > 64 || !std::all_of(label.begin(), label.end(), IsLabelChar)) {
    return Status::InvalidArgument("memory block label " + JsonText(Json(label)), "must be 1 to 64 of A-Z a-z 0-9 _ -");
  }
  return Status::Ok();
}

std::string MemoryBlockPath(const std::string& label) { return std::string(kMemoryBlocksDir) + "/" + label + ".md"; }

std::string MemoryBlockText(const MemoryBlock& block) {
  std::string text = "---\nlabel: " + block.label + "\ndescription: " + JsonText(Json(block.description)) + "\n";
  if (block.limit) text += "limit: " + std::to_string(*block.limit) + "\n";
  text += std::string("read_only: ") + (block.read_only ? "true" : "false") + "\n---\n";
  return text + block.value;
}

Result<MemoryBlock> ParseMemoryBlock(const std::string& path, std::string_view text) {
  const std::string what = path + ": front matter";
  if (text.substr(0, 4) != "---\n") return Status::InvalidArgument(what, "the file must open with a line \"---\"");
  MemoryBlock block;
  bool has_label = false;
  size_t at = 4;
  while (true) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) return Status::InvalidArgument(what, "no closing line \"---\"");
    std::string line(text.substr(at, end - at));
    at = end + 1;
    if (line == "---") break;
    size_t colon = line.find(": ");
    if (colon == std::string::npos) return Status::InvalidArgument(what, "line " + JsonText(Json(line)) + " is not \"key: value\"");
    std::string key = line.substr(0, colon), raw = line.substr(colon + 2);
    if (key == "label") {
      block.label = raw;
      has_label = true;
    } else if (key == "description") {
      CAPSULE_ASSIGN_OR_RETURN(block.description, FrontMatterString(what + ": description", raw));
    } else if (key == "limit") {
      if (raw.empty() || raw.size() > 18 || !std::all_of(raw.begin(), raw.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return Status::InvalidArgument(what + ": limit", "must be a whole number of characters, got " + JsonText(Json(raw)));
      }
      block.limit = std::stoull(raw);
    } else if (key == "read_only") {
      if (raw != "true" && raw != "false") return Status::InvalidArgument(what + ": read_only", "must be true or false");
      block.read_only = raw == "true";
    } else {
      return Status::InvalidArgument(what, "unknown key " + JsonText(Json(key)) + " (label, description, limit, read_only)");
    }
  }
  if (!has_label) return Status::InvalidArgument(what, "no label");
  CAPSULE_RETURN_IF_ERROR(CheckBlockLabel(block.label).WithContext(path));
  if (path != MemoryBlockPath(block.label) && BaseName(path) != block.label + ".md") {
    return Status::InvalidArgument(what, "label " + block.label + " does not match the file's name");
  }
  block.value = std::string(text.substr(at));
  return block;
}

Result<std::vector<MemoryBlock>> LoadMemoryBlocks(const std::string& capsule_dir) {
  std::vector<MemoryBlock> blocks;
  if (!PathExists(JoinPath(capsule_dir, kMemoryBlocksDir))) return blocks;
  CAPSULE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFileNames(JoinPath(capsule_dir, kMemoryBlocksDir)));
  for (const std::string& name : names) {
    if (IsTempDebris(name) || name.size() < 4 || name.substr(name.size() - 3) != ".md") continue;
    std::string rel = std::string(kMemoryBlocksDir) + "/" + name;
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadFileBeneath(capsule_dir, rel));
    CAPSULE_ASSIGN_OR_RETURN(MemoryBlock block, ParseMemoryBlock(rel, text));
    blocks.push_back(std::move(block));
  }
  return blocks;
}

std::string RenderMemoryBlocks(const std::vector<MemoryBlock>& blocks) {
  if (blocks.empty()) return "";
  std::string out = "<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:\n\n";
  for (size_t i = 0; i < blocks.size(); ++i) {
    const MemoryBlock& block = blocks[i];
    out += "<" + block.label + ">\n<description>\n" + block.description + "\n</description>\n<metadata>\n";
    if (block.read_only) out += "- read_only=true\n";
    out += "- chars_current=" + std::to_string(CharacterCount(block.value)) + "\n";
    if (block.limit) out += "- chars_limit=" + std::to_string(*block.limit) + "\n";
    out += "</metadata>\n<value>\n" + block.value + "\n</value>\n</" + block.label + ">\n";
    if (i + 1 < blocks.size()) out += "\n";
  }
  return out + "</memory_blocks>";
}

std::string InstructionsWithBlocks(const std::string& instructions, const std::vector<MemoryBlock>& blocks) {
  std::string rendered = RenderMemoryBlocks(blocks);
  constexpr std::string_view kPlaceholder = "{CORE_MEMORY}";
  size_t at = instructions.find(kPlaceholder);
  if (at != std::string::npos) return instructions.substr(0, at) + rendered + instructions.substr(at + kPlaceholder.size());
  if (rendered.empty()) return instructions;
  if (instructions.empty()) return rendered;
  return instructions + "\n\n" + rendered;
}

}  // namespace capsule
