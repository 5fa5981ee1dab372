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
  return JournalSink([appender](std::string_view line) -> Status {
    Result<Json> parsed = ParseJson(line, kJournalPath);
    if (!parsed.ok()) return Refuse(parsed.status().message());
    const Json& event = *parsed;
    if (!event.is_object()) return Refuse("a line must be a JSON object");
    if (!event.contains("type") || !event["type"].is_string()) return Refuse("a line needs a string \"type\"");
    Json data = event.value("data", Json::object());
    if (!data.is_object()) return Refuse("\"data\" must be a JSON object");
    std::lock_guard lock(appender->mu);
    if (event.contains("machine") && event["machine"] != appender->journal.machine()) {
      return Refuse("the line names machine " + event["machine"].dump() + ", not this one (" +
                    appender->journal.machine() + "): another machine's chain is never written here");
    }
    Result<journal::Event> appended = appender->journal.Append(event["type"], data);
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
