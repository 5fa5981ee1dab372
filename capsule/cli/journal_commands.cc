// capsule log, capsule log append, capsule merge.
#include "capsule/cli/cli.h"

#include <unistd.h>

#include <iostream>
#include <iterator>
#include <memory>

#include "capsule/base/file_io.h"
#include "capsule/format/manifest.h"
#include "journal/event.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"

namespace capsule::cli {

namespace {

using journal::Event;
using journal::Journal;

// The owned-state database follows the journal after each change, best effort: the journal
// is the truth, so a projection that fails is reported and the command still succeeds.
void FollowOwnedState(const std::string& dir) {
  Status followed = owned::FollowJournal(dir);
  if (!followed.ok()) std::cerr << "capsule: warning: owned state not updated: " << followed.message() << "\n";
}

// After an append the owned state follows only when that is quick: when it reads at most
// 1 MiB of the journal. More (a large event, lines other writers added, a large journal to
// rebuild from) is left to the next query, which catches up before it answers.
void FollowOwnedStateAfterAppend(const std::string& dir) {
  constexpr uint64_t kAppendFollowBytes = 1 << 20;
  Result<owned::ProjectionStats> followed = owned::FollowJournalWithin(dir, kAppendFollowBytes);
  if (!followed.ok()) {
    std::cerr << "capsule: warning: owned state not updated: " << followed.status().message() << "\n";
  }
}

struct LogArgs {
  std::string dir;
};

struct AppendArgs {
  std::string dir, type, data;
  bool has_data = false;
};

struct MergeArgs {
  std::string dir, other;
};

// A one-line summary of an event's data for the human listing.
std::string Summary(const Event& event) {
  std::string text;
  for (const char* key : {"text", "name", "content", "key", "status", "awaiting", "model"}) {
    auto it = event.data.find(key);
    if (it == event.data.end()) continue;
    text = it->is_string() ? it->get<std::string>() : JsonText(*it);
    break;
  }
  if (text.empty()) text = JsonText(event.data);
  for (char& c : text) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  constexpr size_t kWidth = 72;
  if (text.size() > kWidth) {
    size_t cut = kWidth;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;  // keep UTF-8 whole
    text = text.substr(0, cut) + "...";
  }
  return text;
}

int RunLog(const LogArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<std::vector<Event>> events = Journal::Read(*dir);
  if (!events.ok()) return Fail(events.status().WithContext(args.dir));
  for (const Event& event : *events) {
    if (JsonOutput()) {
      Result<std::string> line = event.CanonicalLine();
      if (!line.ok()) return Fail(line.status());
      std::cout << *line << "\n";
    } else {
      std::cout << event.clock << " " << event.machine << "#" << event.seq << " " << event.type << " "
                << Summary(event) << "\n";
    }
  }
  return kExitOk;
}

int RunAppend(const AppendArgs& args) {
  std::string text = args.data;
  if (!args.has_data) {
    // No event's data is larger than its line may be: an endless input stops there.
    Result<std::string> read =
        ReadStreamBounded(STDIN_FILENO, "standard input", journal::kMaxEventLineBytes, "an event's data");
    if (!read.ok()) return Fail(read.status().WithContext("log append"));
    text = std::move(read).value();
  }
  Result<Json> data = ParseJson(text, args.has_data ? "--data" : "data on standard input");
  if (!data.ok()) return Fail(data.status());
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<Journal> journal = Journal::OpenForWrite(*dir);
  if (!journal.ok()) return Fail(journal.status());
  Result<Event> event = journal->Append(args.type, *data);
  if (!event.ok()) return Fail(event.status());
  if (JsonOutput()) {
    PrintJson({{"id", event->id}, {"type", event->type}, {"machine", event->machine}, {"seq", event->seq}});
  } else {
    std::cout << event->id << "\n";
  }
  FollowOwnedStateAfterAppend(*dir);
  return kExitOk;
}

int RunMerge(const MergeArgs& args) {
  Result<std::string> dir = ResolveCapsule(args.dir);
  if (!dir.ok()) return Fail(dir.status());
  Result<std::string> other = ResolveCapsule(args.other);
  if (!other.ok()) return Fail(other.status());
  // Two copies of the same agent only.
  Result<Manifest> here = Manifest::Load(*dir);
  if (!here.ok()) return Fail(here.status());
  Result<Manifest> there = Manifest::Load(*other);
  if (!there.ok()) return Fail(there.status());
  if (here->agent.id != there->agent.id) {
    return Fail(Status::InvalidArgument("merge: " + args.other, "holds agent " + there->agent.id + ", not " +
                                                                    here->agent.id));
  }
  Result<journal::OtherJournal> theirs = journal::OtherJournal::Load(*other);
  if (!theirs.ok()) return Fail(theirs.status().WithContext("merge: " + args.other));
  Result<Journal> journal = Journal::OpenForWrite(*dir);
  if (!journal.ok()) return Fail(journal.status());
  Result<journal::MergeResult> merged = journal->MergeFrom(*theirs);
  if (!merged.ok()) return Fail(merged.status().WithContext(args.dir));
  if (JsonOutput()) {
    PrintJson({{"merged", args.other}, {"into", args.dir}, {"added", merged->added}, {"total", merged->total}});
  } else {
    std::cout << "merged " << args.other << " into " << args.dir << ": " << merged->added << " event"
              << (merged->added == 1 ? "" : "s") << " added, " << merged->total << " in all\n";
  }
  FollowOwnedState(*dir);
  return kExitOk;
}

}  // namespace

void RegisterJournalCommands(CLI::App& app, int* exit_code) {
  auto log_args = std::make_shared<LogArgs>();
  CLI::App* log = app.add_subcommand("log", "The journal's events in order; `log append` adds one");
  log->add_option("DIR", log_args->dir, "Capsule folder or its mountpoint");
  AddJsonFlag(log, "Print the canonical lines (an error as JSON)");
  log->require_subcommand(0, 1);

  auto append_args = std::make_shared<AppendArgs>();
  CLI::App* append = log->add_subcommand("append", "Append one event; print its id");
  append->add_option("DIR", append_args->dir, "Capsule folder (held here) or its mountpoint")->required();
  append->add_option("--type", append_args->type, "Event type (below)")->required();
  AddJsonFlag(append);
  append->footer("Event types and their data fields (* required):\n" + journal::EventTypesHelp());
  CLI::Option* data = append->add_option("--data", append_args->data, "Event data, a JSON object (else standard input)");
  append->callback([append_args, data, exit_code] {
    append_args->has_data = data->count() > 0;
    *exit_code = RunAppend(*append_args);
  });

  log->callback([log, append, log_args, exit_code] {
    if (log->got_subcommand(append)) return;
    if (log_args->dir.empty()) throw CLI::RequiredError("DIR");
    *exit_code = RunLog(*log_args);
  });

  auto merge_args = std::make_shared<MergeArgs>();
  CLI::App* merge = app.add_subcommand("merge", "Add to DIR every event of OTHER's journal that DIR lacks");
  merge->add_option("DIR", merge_args->dir, "Capsule folder (held here) or its mountpoint")->required();
  merge->add_option("OTHER", merge_args->other, "Another copy of the capsule (folder or mountpoint)")->required();
  AddJsonFlag(merge);
  merge->callback([merge_args, exit_code] { *exit_code = RunMerge(*merge_args); });
}

}  // namespace capsule::cli
