#include "fs/journal_append.h"

#include <memory>
#include <mutex>
#include <optional>

#include "capsule/base/canonical_json.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"

namespace capsule::fs {

namespace {

struct Appender {
  explicit Appender(journal::Journal j) : journal(std::move(j)) {}
  std::mutex mu;
  journal::Journal journal;  // guarded by mu
  // The owned-state database, following each durable append.
  owned::JournalFollower owned{journal.capsule_dir()};  // guarded by mu
};

Status Refuse(const std::string& why) { return Status::InvalidArgument(kJournalPath, why + "; nothing was kept"); }

}  // namespace

Result<JournalSink> MakeJournalAppender(const std::string& capsule_dir) {
  CAPSULE_ASSIGN_OR_RETURN(journal::Journal opened, journal::Journal::OpenForWrite(capsule_dir));
  auto appender = std::make_shared<Appender>(std::move(opened));
  return JournalSink([appender](const std::vector<std::string>& lines) -> Status {
    // Every line checked before any is appended: a write is taken whole or not at all.
    std::vector<journal::Journal::NewEvent> events;
    for (size_t i = 0; i < lines.size(); ++i) {
      const std::string which = lines.size() == 1 ? "" : "line " + std::to_string(i + 1) + " of the write: ";
      Result<Json> parsed = ParseJson(lines[i], kJournalPath);
      if (!parsed.ok()) return Refuse(which + parsed.status().message());
      const Json& event = *parsed;
      if (!event.is_object()) return Refuse(which + "a line must be a JSON object");
      auto type = event.find("type");
      if (type == event.end() || !type->is_string()) return Refuse(which + "a line needs a string \"type\"");
      auto data = event.find("data");
      if (data != event.end() && !data->is_object()) return Refuse(which + "\"data\" must be a JSON object");
      auto machine = event.find("machine");
      if (machine != event.end() && *machine != appender->journal.machine()) {
        return Refuse(which + "the line names machine " + machine->dump() + ", not this one (" +
                      appender->journal.machine() + "): another machine's chain is never written here");
      }
      events.push_back({type->get<std::string>(), data != event.end() ? *data : Json::object()});
    }
    std::lock_guard lock(appender->mu);
    Result<std::vector<journal::Event>> appended = appender->journal.AppendAll(events);
    if (!appended.ok()) {
      if (appended.status().code() == Code::kInvalidArgument) return Refuse(appended.status().message());
      return appended.status();
    }
    // Best effort: the journal is the truth, so a projection failure never fails the append;
    // the next reader catches the database up (or rebuilds it) anyway.
    (void)appender->owned.Follow();
    return Status::Ok();
  });
}

}  // namespace capsule::fs
