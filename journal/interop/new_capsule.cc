#include "journal/interop/new_capsule.h"

#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/create.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/harness.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"

namespace capsule::journal::interop {

namespace {

Status WriteRel(const std::string& dir, const std::string& rel, std::string_view text) {
  CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(JoinPath(dir, rel))));
  return WriteFileAtomic(JoinPath(dir, rel), text);
}

// The environment spec a new capsule starts with, its secrets the names given.
Result<std::string> SpecWithSecrets(const std::vector<std::string>& names) {
  CAPSULE_ASSIGN_OR_RETURN(Json spec, ParseJson(DefaultEnvironmentSpec(), "environment spec"));
  spec["secrets"] = Json(names);
  CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(spec, "environment spec"));
  CAPSULE_RETURN_IF_ERROR(CheckEnvironmentSpec(text));
  return text;
}

// Fills the capsule just created at `dir` with what `capsule` holds, then lists every file in
// its manifest again.
Status Fill(const std::string& dir, const NewCapsule& capsule) {
  if (!capsule.instructions.empty()) CAPSULE_RETURN_IF_ERROR(WriteRel(dir, kInstructionsPath, capsule.instructions));
  for (const MemoryBlock& block : capsule.blocks) {
    CAPSULE_RETURN_IF_ERROR(CheckBlockLabel(block.label));
    CAPSULE_RETURN_IF_ERROR(WriteRel(dir, MemoryBlockPath(block.label), MemoryBlockText(block)));
  }
  for (const auto& [sha, bytes] : capsule.attachments) {
    CAPSULE_RETURN_IF_ERROR(WriteRel(dir, AttachmentPath(sha), bytes));
  }
  if (capsule.thread_tools) {
    Thread thread;
    thread.name = kImportedConversation;
    thread.tools.emplace(capsule.thread_tools->begin(), capsule.thread_tools->end());
    CAPSULE_ASSIGN_OR_RETURN(std::string text, ThreadText(thread));
    CAPSULE_RETURN_IF_ERROR(WriteRel(dir, std::string(kThreadsDir) + "/" + kImportedConversation + ".json", text));
  }
  if (!capsule.settings.is_null()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string text, CanonicalJson(capsule.settings, kAgentFileSettingsPath));
    CAPSULE_RETURN_IF_ERROR(WriteRel(dir, kAgentFileSettingsPath, text));
  }
  if (!capsule.secret_names.empty()) {
    CAPSULE_ASSIGN_OR_RETURN(std::string spec, SpecWithSecrets(capsule.secret_names));
    CAPSULE_RETURN_IF_ERROR(WriteRel(dir, kEnvironmentSpecPath, spec));
  }
  if (!capsule.events.empty()) {
    auto ts = std::make_shared<std::string>();
    JournalOptions options;
    options.now = [ts] { return *ts; };
    CAPSULE_ASSIGN_OR_RETURN(Journal journal, Journal::OpenForWrite(dir, options));
    for (size_t i = 0; i < capsule.events.size(); ++i) {
      const DatedEvent& event = capsule.events[i];
      *ts = event.ts;
      Json data = event.data;
      data["conversation"] = kImportedConversation;
      Result<Event> appended = journal.Append(event.type, data);
      if (!appended.ok()) return appended.status().WithContext("event " + std::to_string(i + 1) + " (" + event.type + ")");
    }
  }
  CAPSULE_ASSIGN_OR_RETURN(HolderRecord holder, HolderRecord::Load(dir));
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, BuildManifest(dir, capsule.agent, holder.machine, holder.epoch));
  return manifest.Save(dir);
}

Status Make(const std::string& dir, const NewCapsule& capsule) {
  CreateOptions options;
  options.agent = capsule.agent;
  CAPSULE_RETURN_IF_ERROR(CreateCapsule(dir, options));
  return Fill(dir, capsule);
}

bool IsIdChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

}  // namespace

Status WriteNewCapsules(const std::string& dir, const std::vector<NewCapsule>& capsules, bool nested) {
  if (capsules.empty()) return Status::InvalidArgument(dir, "nothing to import");
  if (!nested && capsules.size() != 1) return Status::InvalidArgument(dir, "several agents need a folder each");
  std::vector<std::string> made_parents;
  CAPSULE_ASSIGN_OR_RETURN(std::string staging, MakeStagingDir(dir, &made_parents));
  Status status = [&]() -> Status {
    if (!nested) return Make(staging, capsules[0]);
    for (const NewCapsule& capsule : capsules) {
      CAPSULE_RETURN_IF_ERROR(Make(JoinPath(staging, capsule.agent.id), capsule).WithContext(capsule.agent.id));
    }
    return Status::Ok();
  }();
  if (status.ok()) status = PlaceStagingDir(staging, dir);
  if (!status.ok()) {
    (void)RemoveTree(staging);
    RemoveMadeParents(made_parents);
  }
  return status;
}

std::optional<std::string> ToUtcSeconds(const std::string& time) {
  struct tm tm = {};
  const char* rest = ::strptime(time.c_str(), "%Y-%m-%dT%H:%M:%S", &tm);
  if (rest == nullptr) rest = ::strptime(time.c_str(), "%Y-%m-%d %H:%M:%S", &tm);
  if (rest == nullptr) return std::nullopt;
  if (*rest == '.') {
    ++rest;
    while (*rest >= '0' && *rest <= '9') ++rest;
  }
  long offset = 0;
  if (*rest == 'Z') {
    ++rest;
  } else if (*rest == '+' || *rest == '-') {
    int sign = *rest == '-' ? -1 : 1;
    int hours = 0, minutes = 0;
    if (std::strlen(rest) != 6 || rest[3] != ':' || std::sscanf(rest + 1, "%2d:%2d", &hours, &minutes) != 2) {
      return std::nullopt;
    }
    offset = sign * (hours * 3600L + minutes * 60L);
    rest += 6;
  }
  if (*rest != '\0') return std::nullopt;
  time_t seconds = ::timegm(&tm) - offset;
  struct tm utc;
  if (::gmtime_r(&seconds, &utc) == nullptr) return std::nullopt;
  char out[32];
  if (std::strftime(out, sizeof out, "%Y-%m-%dT%H:%M:%SZ", &utc) == 0) return std::nullopt;
  return std::string(out);
}

std::string AgentIdFromName(const std::string& name) {
  std::string id;
  for (char c : name) id += IsIdChar(c) ? c : '-';
  while (!id.empty() && id[0] == '.') id.erase(0, 1);
  if (id.size() > 128) id.resize(128);
  return id.empty() ? "agent" : id;
}

}  // namespace capsule::journal::interop
