// capsule schedule pause|resume|status, capsule threads, capsule narrow: what the agent is
// besides its memory (capsule/format/harness.h, capsule/format/schedule.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>

#include "capsule/base/dir_fd.h"
#include "capsule/base/file_io.h"
#include "capsule/cli/cli.h"
#include "capsule/base/sha256.h"
#include "capsule/format/attachments.h"
#include "capsule/format/documents.h"
#include "capsule/format/enclosing_capsule.h"
#include "capsule/format/harness.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/schedule.h"
#include "journal/journal.h"

namespace capsule::cli {

namespace {

// Writes one checked document of the capsule PATH names. Through a mount (PATH is its
// mountpoint) the file is written where the agent sees it: the mount checks it and commits it
// whole at close. In a folder no mount serves, it takes the mount lock (so that no mount starts
// meanwhile), needs this machine to hold the capsule, and writes through the durable-write
// path beneath the folder, opened once (a link where a folder or the file belongs is refused,
// never followed), then refreshes the manifest's entry.
Status WriteCapsuleDocument(const std::string& given, const std::string& rel, const std::string& text) {
  CAPSULE_RETURN_IF_ERROR(CheckExists(given));
  CAPSULE_RETURN_IF_ERROR(CheckDocument(rel, text));
  if (PathExists(JoinPath(given, kControlFileName))) {
    CAPSULE_RETURN_IF_ERROR(MakeDirectories(DirName(JoinPath(given, rel))));
    std::string path = JoinPath(given, rel);
    CAPSULE_ASSIGN_OR_RETURN(UniqueFd fd, OpenFile(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    CAPSULE_RETURN_IF_ERROR(WriteAll(fd.get(), text, rel));
    if (::fsync(fd.get()) != 0) return Status::IOError(rel, errno);
    if (::close(fd.Release()) != 0) return Status::IOError(rel, errno);
    return Status::Ok();
  }
  CAPSULE_RETURN_IF_ERROR(CheckCapsuleFolder(given));  // no lock taken in a folder that is not a capsule
  CAPSULE_ASSIGN_OR_RETURN(DirFd root, DirFd::OpenGiven(given));
  Result<UniqueFd> mount = LockForMount(given);
  if (!mount.ok() && mount.status().code() == Code::kAlreadyExists) {
    return Status::FailedPrecondition(given, "a capsulefs mount serves this folder: give its mountpoint");
  }
  if (!mount.ok()) return mount.status();
  CAPSULE_ASSIGN_OR_RETURN(UniqueFd held, HoldForWrite(given));
  for (size_t slash = rel.find('/'); slash != std::string::npos; slash = rel.find('/', slash + 1)) {
    CAPSULE_RETURN_IF_ERROR(root.MakeDir(rel.substr(0, slash), 0755));
  }
  CAPSULE_RETURN_IF_ERROR(root.WriteFileAtomic(rel, text, 0644));
  CAPSULE_ASSIGN_OR_RETURN(Manifest manifest, Manifest::Load(root));
  CAPSULE_RETURN_IF_ERROR(RefreshManifestEntries(root, {rel}, &manifest));
  return manifest.Save(root);
}

int RunScheduleSet(const std::string& dir, bool paused) {
  Status written = WriteCapsuleDocument(dir, kScheduleStatePath, ScheduleStateText(paused));
  if (!written.ok()) return Fail(written.WithContext(std::string("schedule ") + (paused ? "pause" : "resume")));
  if (JsonOutput()) return PrintJson({{"paused", paused}});
  std::cout << (paused ? "paused" : "running") << "\n";
  return kExitOk;
}

int RunScheduleStatus(const std::string& given) {
  Result<std::string> dir = ResolveCapsule(given);
  if (!dir.ok()) return Fail(dir.status());
  Result<ScheduleSummary> summary = LoadScheduleSummary(*dir);
  if (!summary.ok()) return Fail(summary.status().WithContext("schedule status"));
  if (JsonOutput()) {
    return PrintJson({{"jobs", summary->jobs}, {"day", summary->has_day}, {"paused", summary->paused}});
  }
  std::cout << (summary->paused ? "paused" : "running") << ", " << summary->jobs << " job(s)"
            << (summary->has_day ? ", day.json" : "") << "\n";
  return kExitOk;
}

struct ThreadRow {
  uint64_t events = 0;
  std::string provider, model;
  bool has_file = false;
  std::optional<std::set<std::string>> tools;
};

int RunThreads(const std::string& given) {
  Result<std::string> dir = ResolveCapsule(given);
  if (!dir.ok()) return Fail(dir.status());
  Result<std::vector<journal::Event>> events = journal::Journal::Read(*dir);
  if (!events.ok()) return Fail(events.status().WithContext(given));
  Result<std::vector<Thread>> threads = LoadThreads(*dir);
  if (!threads.ok()) return Fail(threads.status().WithContext("threads"));
  std::map<std::string, ThreadRow> rows;
  for (const journal::Event& event : *events) {
    ThreadRow& row = rows[event.Conversation()];
    ++row.events;
    if (event.type == "assistant_message" || event.type == "model_switch") {
      row.provider = event.data.value("provider", "");
      row.model = event.data.value("model", "");
    }
  }
  for (const Thread& thread : *threads) {
    ThreadRow& row = rows[thread.name];
    row.has_file = true;
    row.tools = thread.tools;
  }
  if (JsonOutput()) {
    Json out = Json::array();
    for (const auto& [name, row] : rows) {
      Json item = {{"conversation", name}, {"events", row.events}};
      item["provider"] = row.provider.empty() ? Json() : Json(row.provider);
      item["model"] = row.model.empty() ? Json() : Json(row.model);
      item["tools"] = row.tools ? Json(std::vector<std::string>(row.tools->begin(), row.tools->end())) : Json();
      out.push_back(std::move(item));
    }
    return PrintJson(out);
  }
  for (const auto& [name, row] : rows) {
    std::string tools = "all tools";
    if (row.tools) {
      std::ostringstream list;
      for (const std::string& tool : *row.tools) list << (list.tellp() > 0 ? "," : "") << tool;
      tools = "tools " + (row.tools->empty() ? std::string("none") : list.str());
    }
    std::cout << name << "\t" << row.events << " events\t"
              << (row.model.empty() ? std::string("no model") : row.provider + "/" + row.model) << "\t" << tools << "\n";
  }
  return kExitOk;
}

struct NarrowArgs {
  std::string dir, thread;
  std::vector<std::string> tools;
  bool all = false, none = false;
};

int RunNarrow(const NarrowArgs& args) {
  Status name = CheckThreadName(args.thread);
  if (!name.ok()) return Fail(name.WithContext("narrow"));
  if (args.all + args.none + !args.tools.empty() != 1) {
    return UsageFailure("narrow: give exactly one of --tools LIST, --none or --all", 0, nullptr);
  }
  Thread thread;
  thread.name = args.thread;
  if (!args.all) thread.tools = std::set<std::string>(args.tools.begin(), args.tools.end());
  Result<std::string> text = ThreadText(thread);
  if (!text.ok()) return Fail(text.status());
  Status written = WriteCapsuleDocument(args.dir, std::string(kThreadsDir) + "/" + args.thread + ".json", *text);
  if (!written.ok()) return Fail(written.WithContext("narrow"));
  if (JsonOutput()) {
    return PrintJson({{"conversation", args.thread},
                      {"tools", thread.tools ? Json(std::vector<std::string>(thread.tools->begin(), thread.tools->end())) : Json()}});
  }
  std::cout << *text << "\n";
  return kExitOk;
}

struct AttachArgs {
  std::string dir, file, name, media_type;
};

int RunAttach(const AttachArgs& args) {
  Result<std::string> bytes = ReadFileBounded(args.file, kMaxAttachmentBytes, "an attachment");
  if (!bytes.ok()) return Fail(bytes.status().WithContext("attach"));
  std::string media_type = args.media_type;
  if (media_type.empty()) {
    Result<std::string> sniffed = SniffMediaType(*bytes, args.file);
    if (!sniffed.ok()) return Fail(sniffed.status().WithContext("attach"));
    media_type = *sniffed;
  } else if (!IsAttachmentMediaType(media_type)) {
    return Fail(Status::InvalidArgument("attach: --media-type " + media_type,
                                        "must be image/png, image/jpeg, image/webp, application/pdf or text/plain"));
  }
  std::string sha = Sha256Hex(*bytes);
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  if (!PathExists(JoinPath(*dir, AttachmentPath(sha)))) {  // stored once by content
    Status written = WriteCapsuleDocument(args.dir, AttachmentPath(sha), *bytes);
    if (!written.ok()) return Fail(written.WithContext("attach"));
  }
  Json reference = {{"sha256", sha}, {"media_type", media_type}};
  reference["name"] = args.name.empty() ? BaseName(args.file) : args.name;
  return PrintJson(reference);
}

}  // namespace

void RegisterHarnessCommands(CLI::App& app, int* exit_code) {
  CLI::App* schedule = app.add_subcommand("schedule", "Pause, resume or show the agent's scheduled jobs (schedule/)");
  schedule->require_subcommand(1);
  for (bool paused : {true, false}) {
    auto dir = std::make_shared<std::string>();
    CLI::App* sub = schedule->add_subcommand(
        paused ? "pause" : "resume",
        paused ? "Pause the schedules (writes schedule/state.json); a switch carries them only while paused"
               : "Let the schedules run again");
    sub->add_option("DIR", *dir, "Capsule folder or its mountpoint")->required();
    AddJsonFlag(sub);
    sub->callback([dir, paused, exit_code] { *exit_code = RunScheduleSet(*dir, paused); });
  }
  auto status_dir = std::make_shared<std::string>();
  CLI::App* status = schedule->add_subcommand("status", "Whether the schedules run, and how many jobs there are");
  status->add_option("DIR", *status_dir, "Capsule folder or its mountpoint")->required();
  AddJsonFlag(status);
  status->callback([status_dir, exit_code] { *exit_code = RunScheduleStatus(*status_dir); });

  auto threads_dir = std::make_shared<std::string>();
  CLI::App* threads = app.add_subcommand(
      "threads", "List the conversations: events, current model, and the tools each may use");
  threads->add_option("DIR", *threads_dir, "Capsule folder or its mountpoint")->required();
  AddJsonFlag(threads, "Print a JSON array: conversation, events, provider, model, tools (null: all)");
  threads->callback([threads_dir, exit_code] { *exit_code = RunThreads(*threads_dir); });

  auto narrow_args = std::make_shared<NarrowArgs>();
  CLI::App* narrow = app.add_subcommand(
      "narrow", "Set the tools a conversation may use (harness/threads/THREAD.json), even before its first event");
  narrow->add_option("DIR", narrow_args->dir, "Capsule folder or its mountpoint")->required();
  narrow->add_option("THREAD", narrow_args->thread, "The conversation, e.g. main")->required();
  narrow->add_option("--tools", narrow_args->tools, "Tool names, comma-separated")->delimiter(',');
  narrow->add_flag("--none", narrow_args->none, "No tool at all");
  narrow->add_flag("--all", narrow_args->all, "Every declared tool (the default of a thread without narrowing)");
  AddJsonFlag(narrow);
  narrow->callback([narrow_args, exit_code] { *exit_code = RunNarrow(*narrow_args); });

  auto attach_args = std::make_shared<AttachArgs>();
  CLI::App* attach = app.add_subcommand(
      "attach", "Store a file (PNG, JPEG, WebP, PDF, text) once by digest under memory/attachments/ and print the "
                "reference an event's data.attachments takes");
  attach->add_option("DIR", attach_args->dir, "Capsule folder or its mountpoint")->required();
  attach->add_option("FILE", attach_args->file, "The image or document")->required();
  attach->add_option("--name", attach_args->name, "Its name in the reference (default: the file's)");
  attach->add_option("--media-type", attach_args->media_type, "Its media type (default: from its first bytes)");
  AddJsonFlag(attach, "Accepted for uniformity (the reference is JSON); an error as JSON");
  attach->callback([attach_args, exit_code] { *exit_code = RunAttach(*attach_args); });
}

}  // namespace capsule::cli
