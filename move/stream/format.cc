#include "move/stream/format.h"

#include <fcntl.h>

#include <algorithm>
#include <optional>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"

namespace capsule::move {

namespace {

Status BadManifest(const std::string& why) { return Status::Corruption(kStreamManifestName, why); }

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

const std::map<std::string, std::string>& CapsuleToStream() {
  static const auto* table = new std::map<std::string, std::string>{
      {kWorkingMemoryPath, kStreamNotes},
      {kJournalPath, kStreamJournal},
      {kVectorIndexPath, kStreamVectorIndex},
      {kEnvironmentSpecPath, kStreamEnvironment},
  };
  return *table;
}

const char* SpecialTypeName(TarEntry::Type type) {
  return type == TarEntry::Type::kFifo ? "fifo" : type == TarEntry::Type::kCharDevice ? "chr" : "blk";
}

Json SpecialToJson(const StreamSpecial& special) {
  Json json = {{"type", SpecialTypeName(special.type)}, {"mode", special.mode}};
  if (special.type != TarEntry::Type::kFifo) {
    json["major"] = special.dev_major;
    json["minor"] = special.dev_minor;
  }
  if (special.uid) json["uid"] = *special.uid;
  if (special.gid) json["gid"] = *special.gid;
  return json;
}

// A 32-bit number of a special file's entry, when present.
Result<std::optional<uint32_t>> SpecialNumber(const std::string& path, const Json& json, const char* key) {
  if (!json.contains(key)) return std::optional<uint32_t>();
  const Json& value = json[key];
  if (!value.is_number_unsigned() || value.get<uint64_t>() > UINT32_MAX) {
    return BadManifest("special '" + path + "': " + key + " is not a 32-bit number");
  }
  return std::optional<uint32_t>(value.get<uint32_t>());
}

Result<StreamSpecial> SpecialFromJson(const std::string& path, const Json& json, Phase phase) {
  Status where = CheckStreamPath(path, phase);
  if (!where.ok() || !StartsWith(path, "files/")) {
    return BadManifest("special '" + path + "' is not a plain path under files/");
  }
  if (!json.is_object()) return BadManifest("special '" + path + "' is not an object");
  for (const auto& [key, value] : json.items()) {
    (void)value;
    if (key != "type" && key != "mode" && key != "major" && key != "minor" && key != "uid" && key != "gid") {
      return BadManifest("special '" + path + "' has an unknown field '" + key + "'");
    }
  }
  StreamSpecial special;
  const std::string type = json.value("type", Json()).is_string() ? json["type"].get<std::string>() : "";
  if (type == "fifo") {
    special.type = TarEntry::Type::kFifo;
  } else if (type == "chr") {
    special.type = TarEntry::Type::kCharDevice;
  } else if (type == "blk") {
    special.type = TarEntry::Type::kBlockDevice;
  } else {
    return BadManifest("special '" + path + "': type must be fifo, chr or blk");
  }
  CAPSULE_ASSIGN_OR_RETURN(std::optional<uint32_t> mode, SpecialNumber(path, json, "mode"));
  if (!mode || *mode > 07777) return BadManifest("special '" + path + "': mode must be permission bits");
  special.mode = *mode & 0777;  // never setuid, setgid or sticky from a stream
  CAPSULE_ASSIGN_OR_RETURN(std::optional<uint32_t> major, SpecialNumber(path, json, "major"));
  CAPSULE_ASSIGN_OR_RETURN(std::optional<uint32_t> minor, SpecialNumber(path, json, "minor"));
  const bool device = special.type != TarEntry::Type::kFifo;
  if (major.has_value() != device || minor.has_value() != device) {
    return BadManifest("special '" + path + "': major and minor are a device's, and a device's only");
  }
  special.dev_major = major.value_or(0);
  special.dev_minor = minor.value_or(0);
  CAPSULE_ASSIGN_OR_RETURN(special.uid, SpecialNumber(path, json, "uid"));
  CAPSULE_ASSIGN_OR_RETURN(special.gid, SpecialNumber(path, json, "gid"));
  return special;
}

}  // namespace

const char* PhaseName(Phase phase) {
  switch (phase) {
    case Phase::kCopy: return "copy";
    case Phase::kSwitch: return "switch";
    case Phase::kFiles: return "files";
  }
  return "copy";
}

Result<Phase> ParsePhase(const std::string& name) {
  if (name == "copy") return Phase::kCopy;
  if (name == "switch") return Phase::kSwitch;
  if (name == "files") return Phase::kFiles;
  return Status::InvalidArgument("phase '" + name + "'", "must be copy, switch or files");
}

std::vector<std::string> AllowedRoots(Phase phase) {
  switch (phase) {
    case Phase::kCopy: return {"files", "memory", "harness", "connections"};
    case Phase::kSwitch: return {"files", "memory", "harness", "connections", "schedule"};
    case Phase::kFiles: return {"files"};
  }
  return {};
}

Status CheckStreamPath(const std::string& path, Phase phase) {
  if (!IsPlainRelativePath(path)) {
    return Status::Corruption("stream entry '" + path + "'", "unsafe path (absolute, '.', '..', empty component or NUL)");
  }
  for (const std::string& root : AllowedRoots(phase)) {
    if (path == root || StartsWith(path, root + "/")) return Status::Ok();
  }
  return Status::Corruption("stream entry '" + path + "'",
                            std::string("outside the folders a ") + PhaseName(phase) + " stream may hold");
}

Status CheckStreamLink(const std::string& path, const std::string& target, Phase phase) {
  (void)phase;  // where a link may lie is CheckStreamPath's rule, as for any entry
  // A link's target is data, kept as written: absolute, relative, dangling or climbing out.
  // Nothing that places a stream reads or writes through a link, so where it points is the
  // agent's business. What a link cannot be is empty, hold a NUL, or be longer than a link
  // may be on any file system we write to.
  std::string what = "stream link '" + path + "'";
  if (target.empty()) return Status::Corruption(what, "has an empty target");
  if (target.find('\0') != std::string::npos) return Status::Corruption(what, "target holds a NUL byte");
  if (target.size() >= kMaxLinkTarget) {
    return Status::Corruption(what, "target is " + std::to_string(target.size()) + " bytes; a link holds at most " +
                                        std::to_string(kMaxLinkTarget - 1));
  }
  return Status::Ok();
}

Result<std::string> StreamManifest::ToCanonicalText() const {
  Json agent_json = {{"id", agent.id}, {"name", agent.name}};
  if (agent.owner) agent_json["owner"] = *agent.owner;
  Json json = {{"format", kStreamFormat}, {"phase", PhaseName(phase)}, {"move", move},
               {"version", version},      {"agent", agent_json},         {"harness", harness},
               {"epoch", epoch}};
  if (phase == Phase::kSwitch) json["removed"] = removed;
  if (!special.empty()) {
    Json specials = Json::object();
    for (const auto& [path, item] : special) specials[path] = SpecialToJson(item);
    json["special"] = specials;
  }
  return CanonicalJson(json, kStreamManifestName);
}

Result<StreamManifest> StreamManifest::Parse(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, kStreamManifestName, Code::kCorruption));
  if (!json.is_object()) return BadManifest("not a JSON object");
  if (!json.contains("format") || json["format"] != kStreamFormat) {
    return BadManifest("another format (" + json.value("format", Json()).dump() + "); this end speaks format 4");
  }
  StreamManifest manifest;
  if (!json.value("phase", Json()).is_string()) return BadManifest("no phase");
  Result<Phase> phase = ParsePhase(json["phase"]);
  if (!phase.ok()) return BadManifest(phase.status().message());
  manifest.phase = *phase;
  std::string move = json.value("move", Json()).is_string() ? json["move"].get<std::string>() : "";
  if (!IsMoveId(move)) return BadManifest("move must be 128 bits in lowercase hex");
  manifest.move = move;
  if (!json.value("version", Json()).is_string()) return BadManifest("no version");
  manifest.version = json["version"];
  const Json& agent = json.value("agent", Json());
  if (!agent.is_object() || !agent.value("id", Json()).is_string() || !agent.value("name", Json()).is_string()) {
    return BadManifest("agent needs a string id and name");
  }
  manifest.agent.id = agent["id"];
  // The agent's id names its folder wherever it arrives: one `capsule init` would refuse is
  // refused here too ("../../evil").
  if (!CheckAgentId(manifest.agent.id).ok()) {
    return BadManifest("agent.id " + ShownText(manifest.agent.id) +
                       " is not an agent id (1 to 128 letters, digits, '.', '_' or '-', not starting with '.')");
  }
  manifest.agent.name = agent["name"];
  if (agent.contains("owner")) {
    if (!agent["owner"].is_string()) return BadManifest("agent.owner is not a string");
    manifest.agent.owner = agent["owner"].get<std::string>();
  }
  if (!json.value("harness", Json()).is_string()) return BadManifest("no harness");
  manifest.harness = json["harness"];
  if (!json.value("epoch", Json()).is_number_unsigned()) return BadManifest("no epoch");
  manifest.epoch = json["epoch"];
  if (Status bounded = CheckEpoch(manifest.epoch); !bounded.ok()) return BadManifest(bounded.message());
  if (json.contains("removed")) {
    if (manifest.phase != Phase::kSwitch) return BadManifest("removed appears outside a switch");
    if (!json["removed"].is_array()) return BadManifest("removed is not a list");
    for (const Json& path : json["removed"]) {
      if (!path.is_string()) return BadManifest("removed holds a non-string");
      std::string p = path;
      if (!IsPlainRelativePath(p) || !(StartsWith(p, "files/") || StartsWith(p, "memory/"))) {
        return BadManifest("removed path '" + p + "' is not under files/ or memory/");
      }
      manifest.removed.push_back(p);
    }
  }
  if (json.contains("special")) {
    if (!json["special"].is_object()) return BadManifest("special is not an object of path: entry");
    for (const auto& [path, item] : json["special"].items()) {
      CAPSULE_ASSIGN_OR_RETURN(manifest.special[path], SpecialFromJson(path, item, manifest.phase));
    }
  }
  return manifest;
}

Result<std::string> NewMoveId() { return RandomHex(16); }

Status CheckEpoch(uint64_t epoch) {
  if (epoch >= 1 && epoch <= kMaxEpoch) return Status::Ok();
  return Status::InvalidArgument("epoch " + std::to_string(epoch),
                                 "an epoch is a whole number from 1 to 2^53-1 (" + std::to_string(kMaxEpoch) + ")");
}

bool IsMoveId(std::string_view id) {
  return id.size() == 32 && id.find_first_not_of("0123456789abcdef") == std::string_view::npos;
}

Status CheckMoveId(const std::string& id) {
  if (IsMoveId(id)) return Status::Ok();
  return Status::InvalidArgument("move id " + ShownText(id), "must be 32 lowercase hex digits (128 random bits)");
}

std::string ShownText(std::string_view text) {
  constexpr size_t kMaxShown = 200;
  std::string shown = Json(std::string(text.substr(0, kMaxShown)))
                          .dump(-1, ' ', /*ensure_ascii=*/true, Json::error_handler_t::replace);
  if (text.size() > kMaxShown) shown += " (cut; " + std::to_string(text.size()) + " bytes in all)";
  return shown;
}

Result<HaveMap> HaveFromJson(const Json& json, Code code) {
  if (!json.is_object()) return Status::Make(code, "have", "must be an object of path: sha256");
  HaveMap have;
  for (const auto& [path, sha] : json.items()) {
    if (!sha.is_string() || !IsSha256Hex(sha.get<std::string>())) {
      return Status::Make(code, "have['" + path + "']", "must be a SHA-256 in hex");
    }
    have[path] = sha;
  }
  return have;
}

namespace {

// Reads a have written as HaveToJson writes one (canonical, plain ASCII strings) without
// building a Json document: a million files' have is a hundred megabytes. Anything else
// gives nullopt, and the general reader reads it (or says why not).
std::optional<HaveMap> ReadCanonicalHave(std::string_view text) {
  CanonicalReader in(text);
  HaveMap have;
  if (!in.Literal("{")) return {};
  for (bool first = true; !in.Literal("}"); first = false) {
    if (!first && !in.Literal(",")) return {};
    std::string path, sha;
    if (!in.String(&path) || !in.Literal(":") || !in.String(&sha) || !IsSha256Hex(sha)) return {};
    if (!have.empty() && path <= have.rbegin()->first) return {};  // canonical order, no duplicates
    have.emplace_hint(have.end(), std::move(path), std::move(sha));
  }
  if (!in.AtEnd()) return {};
  return have;
}

}  // namespace

Result<HaveMap> ParseHave(std::string_view text, Code code) {
  if (std::optional<HaveMap> fast = ReadCanonicalHave(text)) return std::move(*fast);
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, "have", code));
  return HaveFromJson(json, code);
}

Json HaveToJsonObject(const HaveMap& have) {
  Json json = Json::object();
  for (const auto& [path, sha] : have) json[path] = sha;
  return json;
}

Result<std::string> HaveToJson(const HaveMap& have) {
  CanonicalWriter out;
  out.Reserve(2 + have.size() * 110);
  out.Raw("{");
  bool first = true;
  for (const auto& [path, sha] : have) {
    if (!first) out.Raw(",");
    first = false;
    out.String(path);
    out.Raw(":");
    out.String(sha);
  }
  out.Raw("}");
  if (out.ok()) return out.Take();
  return CanonicalJson(HaveToJsonObject(have), "have");  // a path that needs escaping
}

std::optional<std::string> StreamPathOfCapsuleFile(const std::string& capsule_path) {
  auto it = CapsuleToStream().find(capsule_path);
  if (it != CapsuleToStream().end()) return it->second;
  if (StartsWith(capsule_path, std::string(kScheduleDir) + "/") || IsHarnessPath(capsule_path) ||
      StartsWith(capsule_path, std::string(kAttachmentsDir) + "/")) {
    return capsule_path;
  }
  return std::nullopt;
}

std::optional<std::string> CapsulePathOfStreamFile(const std::string& stream_path) {
  for (const auto& [capsule_path, stream] : CapsuleToStream()) {
    if (stream == stream_path) return capsule_path;
  }
  if (StartsWith(stream_path, std::string(kScheduleDir) + "/") || IsHarnessPath(stream_path) ||
      StartsWith(stream_path, std::string(kAttachmentsDir) + "/")) {
    return stream_path;
  }
  return std::nullopt;
}

}  // namespace capsule::move
