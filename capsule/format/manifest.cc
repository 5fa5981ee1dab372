#include "capsule/format/manifest.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <optional>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"

namespace capsule {

Json Manifest::ToJson() const {
  Json agent_json = {{"id", agent.id}, {"name", agent.name}};
  if (agent.owner) agent_json["owner"] = *agent.owner;
  Json files_json = Json::object();
  for (const auto& [path, digest] : files) {
    files_json[path] = {{"sha256", digest.sha256}, {"size", digest.size}};
  }
  return {{"format", kCapsuleFormat},
          {"agent", agent_json},
          {"holder", {{"machine", holder_machine}, {"epoch", holder_epoch}}},
          {"files", files_json}};
}

Result<std::string> Manifest::ToCanonicalText() const {
  // Keys in canonical (byte) order: agent {id, name, owner}, files {path: {sha256, size}},
  // format, holder {epoch, machine}.
  CanonicalWriter out;
  // Room for the whole text, so that it is never copied as it grows: an entry is its path,
  // its digest and 50 bytes of keys and size.
  size_t bound = 256 + agent.id.size() + agent.name.size() + (agent.owner ? agent.owner->size() : 0) +
                 holder_machine.size();
  for (const auto& [path, digest] : files) bound += path.size() + digest.sha256.size() + 50;
  out.Reserve(bound);
  out.Raw("{\"agent\":{\"id\":");
  out.String(agent.id);
  out.Raw(",\"name\":");
  out.String(agent.name);
  if (agent.owner) {
    out.Raw(",\"owner\":");
    out.String(*agent.owner);
  }
  out.Raw("},\"files\":{");
  bool first = true;
  for (const auto& [path, digest] : files) {
    if (!first) out.Raw(",");
    first = false;
    out.String(path);
    out.Raw(":{\"sha256\":");
    out.String(digest.sha256);
    out.Raw(",\"size\":");
    out.Unsigned(digest.size);
    out.Raw("}");
  }
  out.Raw("},\"format\":");
  out.Unsigned(kCapsuleFormat);
  out.Raw(",\"holder\":{\"epoch\":");
  out.Unsigned(holder_epoch);
  out.Raw(",\"machine\":");
  out.String(holder_machine);
  out.Raw("}}");
  if (out.ok()) return out.Take();
  return CanonicalJson(ToJson(), kManifestPath);  // a string that needs escaping
}

namespace {

Status Bad(const std::string& why) { return Status::Corruption(kManifestPath, why); }

}  // namespace

namespace {

// Reads a manifest written exactly as ToCanonicalText writes one (canonical form, every
// string plain ASCII without escapes), without building a Json document: the manifests this
// program wrote, which is nearly every one it reads. Anything else, or anything the general
// reader would refuse, gives nullopt, and the general reader then reads it (or says why not).
std::optional<Manifest> ReadCanonicalManifest(std::string_view text, bool keep_files = true) {
  CanonicalReader in(text);
  Manifest m;
  if (!in.Literal("{\"agent\":{\"id\":") || !in.String(&m.agent.id) || !in.Literal(",\"name\":") ||
      !in.String(&m.agent.name)) {
    return {};
  }
  if (in.Literal(",\"owner\":")) {
    std::string owner;
    if (!in.String(&owner)) return {};
    m.agent.owner = std::move(owner);
  }
  if (!in.Literal("},\"files\":{")) return {};
  std::string previous;
  std::string path;
  FileDigest digest;
  for (bool first = true; !in.Literal("}"); first = false) {
    if (!first && !in.Literal(",")) return {};
    path.clear();
    digest.sha256.clear();
    if (!in.String(&path) || !in.Literal(":{\"sha256\":") || !in.String(&digest.sha256) ||
        !in.Literal(",\"size\":") || !in.Unsigned(&digest.size) || !in.Literal("}")) {
      return {};
    }
    // Canonical order, no duplicates; a path the general reader refuses goes to it.
    if ((!first && path <= previous) || !IsPlainRelativePath(path) || path == kManifestPath ||
        path.rfind(std::string(kLocalDir) + "/", 0) == 0 || !IsSha256Hex(digest.sha256)) {
      return {};
    }
    if (keep_files) {
      previous = path;
      m.files.emplace_hint(m.files.end(), std::move(path), std::move(digest));
    } else {
      if (path == kJournalPath) m.files.emplace(path, digest);
      previous.swap(path);
    }
  }
  uint64_t format = 0;
  if (!in.Literal(",\"format\":") || !in.Unsigned(&format) || format != static_cast<uint64_t>(kCapsuleFormat)) {
    return {};
  }
  if (!in.Literal(",\"holder\":{\"epoch\":") || !in.Unsigned(&m.holder_epoch) || !in.Literal(",\"machine\":") ||
      !in.String(&m.holder_machine) || !in.Literal("}}") || !in.AtEnd()) {
    return {};
  }
  return m;
}

}  // namespace

Result<Manifest> Manifest::Parse(std::string_view text) {
  if (std::optional<Manifest> fast = ReadCanonicalManifest(text)) return std::move(*fast);
  return ParseThroughJson(text);
}

Result<Manifest> Manifest::ParseThroughJson(std::string_view text) {
  CAPSULE_ASSIGN_OR_RETURN(Json json, ParseJson(text, kManifestPath, Code::kCorruption));
  if (!json.is_object()) return Bad("not a JSON object");
  if (!json.contains("format") || !json["format"].is_number_integer()) return Bad("no format");
  if (json["format"].get<int64_t>() != kCapsuleFormat) {
    return Bad("format " + json["format"].dump() + " is not the format this build reads (1)");
  }
  Manifest manifest;
  const Json& agent = json.value("agent", Json());
  if (!agent.is_object() || !agent.contains("id") || !agent["id"].is_string() ||
      !agent.contains("name") || !agent["name"].is_string()) {
    return Bad("agent needs a string id and name");
  }
  manifest.agent.id = agent["id"];
  manifest.agent.name = agent["name"];
  if (agent.contains("owner")) {
    if (!agent["owner"].is_string()) return Bad("agent.owner is not a string");
    manifest.agent.owner = agent["owner"].get<std::string>();
  }
  const Json& holder = json.value("holder", Json());
  if (!holder.is_object() || !holder.contains("machine") || !holder["machine"].is_string() ||
      !holder.contains("epoch") || !holder["epoch"].is_number_unsigned()) {
    return Bad("holder needs a string machine and a whole-number epoch");
  }
  manifest.holder_machine = holder["machine"];
  manifest.holder_epoch = holder["epoch"];
  const Json& files = json.value("files", Json());
  if (!files.is_object()) return Bad("files is not an object");
  for (const auto& [path, entry] : files.items()) {
    if (!IsPlainRelativePath(path) || path == kManifestPath ||
        path.rfind(std::string(kLocalDir) + "/", 0) == 0) {
      return Bad("files lists a path it may not: '" + path + "'");
    }
    if (!entry.is_object() || !entry.contains("sha256") || !entry["sha256"].is_string() ||
        !IsSha256Hex(entry["sha256"].get<std::string>()) || !entry.contains("size") ||
        !entry["size"].is_number_unsigned()) {
      return Bad("files['" + path + "'] needs a sha256 (64 hex digits) and a size");
    }
    manifest.files[path] = FileDigest{entry["sha256"], entry["size"]};
  }
  return manifest;
}

namespace {

Result<std::string> ReadManifestText(const std::string& capsule_dir) {
  Result<std::string> text = ReadFileBeneath(capsule_dir, kManifestPath);
  if (!text.ok() && text.status().code() == Code::kNotFound) {
    return Status::NotFound(JoinPath(capsule_dir, kManifestPath), "missing: not a capsule");
  }
  return text;
}

}  // namespace

Result<Manifest> Manifest::Load(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadManifestText(capsule_dir));
  return Parse(text);
}

Result<Manifest> Manifest::Load(const DirFd& folder) {
  Result<std::string> text = folder.ReadFile(kManifestPath);
  if (!text.ok() && text.status().code() == Code::kNotFound) {
    return Status::NotFound(folder.PathOf(kManifestPath), "missing: not a capsule");
  }
  if (!text.ok()) return text.status();
  return Parse(*text);
}

Result<Manifest> Manifest::ParseHeader(std::string_view text) {
  if (std::optional<Manifest> fast = ReadCanonicalManifest(text, /*keep_files=*/false)) return std::move(*fast);
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, ParseThroughJson(text));
  std::erase_if(manifest.files, [](const auto& entry) { return entry.first != kJournalPath; });
  return manifest;
}

Result<Manifest> Manifest::LoadHeader(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ReadManifestText(capsule_dir));
  return ParseHeader(text);
}

FileDigest FileDigest::OfText(std::string_view text) { return FileDigest{Sha256Hex(text), text.size()}; }

Status Manifest::Save(const std::string& capsule_dir) const {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ToCanonicalText());
  return WriteFileAtomic(JoinPath(capsule_dir, kManifestPath), text);
}

Status Manifest::Save(const DirFd& folder) const {
  CAPSULE_ASSIGN_OR_RETURN(std::string text, ToCanonicalText());
  return folder.WriteFileAtomic(kManifestPath, text, 0644);
}

Status RefreshManifestEntries(const std::string& capsule_dir, const std::vector<std::string>& paths,
                              Manifest* manifest, DigestCache* growing) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd folder, DirFd::OpenGiven(capsule_dir));
  return RefreshManifestEntries(folder, paths, manifest, growing);
}

Result<std::optional<FileDigest>> DigestBeneath(const DirFd& folder, const std::string& path, DigestCache* growing) {
  Result<struct stat> st = folder.Stat(path);
  if (!st.ok() && st.status().code() == Code::kNotFound) return std::optional<FileDigest>();
  if (!st.ok()) return st.status();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, folder.OpenFile(path, O_RDONLY));
  FileDigest digest;
  const std::string full = folder.PathOf(path);
  CAPSULE_ASSIGN_OR_RETURN(digest.sha256, growing != nullptr && path == kJournalPath
                                              ? growing->Sha256GrowingOpened(fd.get(), full, UINT64_MAX, nullptr,
                                                                             &digest.size)
                                              : Sha256Fd(fd.get(), full, &digest.size));
  return std::optional<FileDigest>(std::move(digest));
}

Status RefreshManifestEntries(const DirFd& folder, const std::vector<std::string>& paths, Manifest* manifest,
                              DigestCache* growing) {
  for (const std::string& path : paths) {
    CAPSULE_ASSIGN_OR_RETURN(std::optional<FileDigest> found, DigestBeneath(folder, path, growing));
    if (found) {
      manifest->files[path] = std::move(*found);
    } else {
      manifest->files.erase(path);
    }
  }
  return Status::Ok();
}

}  // namespace capsule
