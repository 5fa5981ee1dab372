// capsule import and export of other frameworks' state: a Letta Agent File (.af) in and out.
// The tar forms of import and export are in capsule_commands.cc, which hands these over.
#include <fcntl.h>
#include <unistd.h>

#include <iostream>

#include "capsule/base/file_io.h"
#include "capsule/base/output_file.h"
#include "capsule/cli/cli.h"
#include "capsule/format/mount_lock.h"
#include "journal/interop/agent_file.h"

namespace capsule::cli {

namespace {

// The largest agent file or request body read.
constexpr uint64_t kMaxForeignFileBytes = uint64_t{256} << 20;

Json AgentSummary(const journal::interop::NewCapsule& capsule, const std::string& dir) {
  return {{"id", capsule.agent.id},         {"name", capsule.agent.name},         {"dir", dir},
          {"events", capsule.events.size()}, {"blocks", capsule.blocks.size()},
          {"tools", capsule.thread_tools ? capsule.thread_tools->size() : 0}};
}

}  // namespace

bool IsForeignImport(const std::string& file, const std::string& from) {
  if (!from.empty()) return true;
  UniqueFd fd(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) return false;
  char head[64];
  ssize_t n = ::read(fd.get(), head, sizeof head);
  for (ssize_t i = 0; i < n; ++i) {
    if (head[i] == ' ' || head[i] == '\n' || head[i] == '\r' || head[i] == '\t') continue;
    return head[i] == '{';  // a tar opens with a file name, never with '{'
  }
  return false;
}

int RunForeignImport(const std::string& file, const std::string& dir, const std::string& from,
                     const std::string& agent) {
  if (Status there = CheckExists(file); !there.ok()) return Fail(there);
  if (Status outside = CheckOutsideCapsules("", dir); !outside.ok()) return Fail(outside);
  std::string what = from.empty() || from == "af" ? "an agent file" : "a request body";
  Result<std::string> text = ReadFileBounded(file, kMaxForeignFileBytes, what);
  if (!text.ok()) return Fail(text.status());
  Result<Json> document = ParseJson(*text, file);
  if (!document.ok()) return Fail(document.status());
  std::string format = from;
  if (format.empty()) {
    if (!journal::interop::LooksLikeAgentFile(*document)) {
      return Fail(Status::InvalidArgument(file, "not an agent file (no \"agents\" array); a provider's request body "
                                                "needs --from openai, anthropic or gemini"));
    }
    format = "af";
  }
  if (!agent.empty() && format != "af") return Fail(Status::InvalidArgument("--agent", "names an agent of an agent file (--from af)"));

  std::vector<journal::interop::NewCapsule> capsules;
  std::vector<std::string> dropped, secrets;
  if (format == "af") {
    Result<journal::interop::AgentFileImport> read =
        journal::interop::ReadAgentFile(*document, agent.empty() ? std::nullopt : std::optional<std::string>(agent));
    if (!read.ok()) return Fail(read.status().WithContext(file));
    capsules = std::move(read->capsules);
    dropped = std::move(read->dropped);
    secrets = std::move(read->secret_names);
  } else {
    return Fail(Status::InvalidArgument("--from " + format, "not read by this build"));
  }
  bool nested = capsules.size() > 1;
  Status written = journal::interop::WriteNewCapsules(dir, capsules, nested);
  if (!written.ok()) return Fail(written);

  for (const std::string& item : dropped) std::cerr << "capsule: dropped (no place in a capsule): " << item << "\n";
  if (!secrets.empty()) {
    std::string names;
    for (const std::string& name : secrets) names += (names.empty() ? "" : ", ") + name;
    std::cerr << "capsule: secrets listed by name only in environment/spec.json, their values not imported: " << names << "\n";
  }
  Json agents = Json::array();
  for (const auto& capsule : capsules) agents.push_back(AgentSummary(capsule, nested ? JoinPath(dir, capsule.agent.id) : dir));
  if (JsonOutput()) {
    return PrintJson({{"imported", file}, {"from", format}, {"dir", dir}, {"agents", agents}, {"dropped", dropped},
                      {"secrets", secrets}});
  }
  for (const Json& summary : agents) {
    std::cout << "imported " << file << " (" << format << ") to " << summary["dir"].get<std::string>() << ": agent "
              << summary["name"].get<std::string>() << ", " << summary["events"] << " events, " << summary["blocks"]
              << " memory blocks, " << summary["tools"] << " tools\n";
  }
  return kExitOk;
}

int RunAgentFileExport(const std::string& dir_arg, const std::string& out) {
  if (out == "-") StandardOutputIsData();
  if (Status outside = CheckOutsideCapsules("-o", out); !outside.ok()) return Fail(outside);
  Result<std::string> dir = ResolveCapsule(dir_arg);
  if (!dir.ok()) return Fail(dir.status());
  if (Status settled = WaitForUnmountToFinish(*dir); !settled.ok()) return Fail(settled);
  Result<Json> file = journal::interop::WriteAgentFile(*dir);
  if (!file.ok()) return Fail(file.status().WithContext(dir_arg));
  Result<std::string> text = CanonicalJson(*file, "agent file");
  if (!text.ok()) return Fail(text.status());
  Result<OutputFile> output = OutputFile::Open(out);
  if (!output.ok()) return Fail(output.status());
  Status status = output->sink()->Write(*text + "\n");
  if (status.ok()) status = output->sink()->Close();
  if (status.ok()) status = output->Commit();
  if (!status.ok()) return Fail(status);
  if (JsonOutput() && out != "-") return PrintJson({{"exported", dir_arg}, {"output", out}, {"format", "af"}});
  (out == "-" ? std::cerr : std::cout) << "exported " << dir_arg << " to " << (out == "-" ? "standard output" : out)
                                       << " (agent file)\n";
  return kExitOk;
}

}  // namespace capsule::cli
