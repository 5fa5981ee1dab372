#include "capsule/base/mutex.h"
#include "fs/journal_append.h"

#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"

namespace capsule::fs {

namespace {

// Keeps the owned-state database following the journal, off the appends' path: each durable
// append wakes it, and the appends that come while it works are taken in one catch-up. The
// journal is the truth and every reader catches the database up itself, so a projection
// that lags (or fails) never holds up or fails an append. Its thread starts with the first
// append, after the driver has become a daemon (a fork keeps no threads); it catches up one
// last time before it goes.
class BackgroundFollower {
 public:
  explicit BackgroundFollower(std::string capsule_dir) : follower_(std::move(capsule_dir)) {}
  ~BackgroundFollower() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    if (thread_.joinable()) thread_.join();
  }

  void Wake() {
    {
      std::lock_guard lock(mu_);
      pending_ = true;
      if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
    }
    wake_.notify_one();
  }

 private:
  void Run() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [&]() REQUIRES(mu_) { return pending_ || stop_; });
      if (!pending_) return;  // stopping, and nothing left to follow
      pending_ = false;
      lock.unlock();
      (void)follower_.Follow();  // best effort: see above
      lock.lock();
    }
  }

  owned::JournalFollower follower_;  // used by the thread only
  Mutex mu_;
  std::condition_variable wake_;
  bool pending_ GUARDED_BY(mu_) = false;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_ GUARDED_BY(mu_);
};

struct Appender {
  explicit Appender(journal::Journal j) : machine(j.machine()), journal(std::move(j)), owned(journal.capsule_dir()) {}
  const std::string machine;  // the journal's, fixed when it opened: read without the lock
  Mutex mu;
  journal::Journal journal GUARDED_BY(mu);
  BackgroundFollower owned;
};

Status Refuse(const std::string& why) { return Status::InvalidArgument(kJournalPath, why + "; nothing was kept"); }

}  // namespace

Result<JournalSink> MakeJournalAppender(const DirFd& folder) {
  CAPSULE_ASSIGN_OR_RETURN(DirFd held, folder.Duplicate());
  CAPSULE_ASSIGN_OR_RETURN(journal::Journal opened, journal::Journal::OpenForWrite(std::move(held)));
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
      if (machine != event.end() && *machine != appender->machine) {
        return Refuse(which + "the line names machine " + machine->dump() + ", not this one (" +
                      appender->machine + "): another machine's chain is never written here");
      }
      events.push_back({type->get<std::string>(), data != event.end() ? *data : Json::object()});
    }
    std::lock_guard lock(appender->mu);
    Result<std::vector<journal::Event>> appended = appender->journal.AppendAll(events);
    if (!appended.ok()) {
      if (appended.status().code() == Code::kInvalidArgument) return Refuse(appended.status().message());
      return appended.status();
    }
    appender->owned.Wake();
    return Status::Ok();
  });
}

}  // namespace capsule::fs
