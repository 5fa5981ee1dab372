// Crash test: a child process appends in a loop (durable policy) and reports, through a pipe,
// each append it begins ("+N") and each acknowledged id; it is SIGKILLed at a random moment,
// many times, and some rounds also leave a half-written line (a torn write). After each kill
// the journal opens, holds every acknowledged event, and verifies. The kills are counted by
// where they landed: most must land inside an append (begun, not acknowledged), or the rounds
// tested too little to pass.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <random>
#include <set>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/test_util.h"

namespace capsule::journal {
namespace {

[[noreturn]] void AppendForever(const std::string& dir, int report_fd) {
  Result<Journal> journal = Journal::OpenForWrite(dir);  // durable: fdatasync per append
  if (!journal.ok()) ::_exit(2);
  for (int i = 0;; ++i) {
    const std::string begun = "+" + std::to_string(i) + "\n";
    if (::write(report_fd, begun.data(), begun.size()) != static_cast<ssize_t>(begun.size())) ::_exit(4);
    Result<Event> event = journal->Append("user_message", {{"text", "event " + std::to_string(i)}});
    if (!event.ok()) ::_exit(3);
    std::string line = event->id + "\n";
    if (::write(report_fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) ::_exit(4);
  }
}

TEST(CrashTest, KilledAppenderLosesNoAcknowledgedEvent) {
  std::string dir = testing::MakeTempDir("crash") + "/capsule";
  ASSERT_TRUE(testing::MakeTestCapsule(dir, testing::MachineName(1)).ok());
  std::mt19937 rng(12345);
  std::set<std::string> acknowledged;
  int torn_rounds = 0;
  int kills_mid_append = 0;
  const int rounds = 50;
  for (int round = 0; round < rounds; ++round) {
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      ::close(fds[0]);
      AppendForever(dir, fds[1]);
    }
    ::close(fds[1]);
    std::string reported;
    char buffer[4096];
    ssize_t got;
    // Every other round, kill only once the child has acknowledged something; the others once
    // it has begun its first append (not while it starts).
    auto ready = [&] {
      if (round % 2 == 1) return reported.find('+') != std::string::npos;
      for (size_t start = 0, end; (end = reported.find('\n', start)) != std::string::npos; start = end + 1) {
        if (reported[start] != '+') return true;
      }
      return false;
    };
    while (!ready() && (got = ::read(fds[0], buffer, sizeof(buffer))) > 0) {
      reported.append(buffer, static_cast<size_t>(got));
    }
    ASSERT_TRUE(ready()) << "round " << round << ": the appender ended before it began";
    ::usleep(static_cast<useconds_t>(rng() % 20000));  // where the kill lands: counted below
    ::kill(child, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status)) << "child exited by itself: " << WEXITSTATUS(status);
    while ((got = ::read(fds[0], buffer, sizeof(buffer))) > 0) reported.append(buffer, static_cast<size_t>(got));
    ::close(fds[0]);
    bool last_begun = false;  // the last line: an append begun and never acknowledged
    for (size_t start = 0, end; (end = reported.find('\n', start)) != std::string::npos; start = end + 1) {
      last_begun = reported[start] == '+';
      if (!last_begun) acknowledged.insert(reported.substr(start, end - start));
    }
    if (last_begun) ++kills_mid_append;

    std::string journal_path = JoinPath(dir, kJournalPath);
    if (rng() % 3 == 0) {
      // A crash in the middle of write(2): part of a line, without its newline.
      std::string text = *ReadFile(journal_path);
      std::string last = text.substr(text.rfind('\n', text.size() - 2) + 1);
      Result<UniqueFd> fd = OpenFile(journal_path, O_WRONLY | O_APPEND);
      ASSERT_TRUE(fd.ok());
      ASSERT_TRUE(WriteAll(fd->get(), last.substr(0, 1 + rng() % (last.size() - 1)), "journal").ok());
      ++torn_rounds;
    }

    Result<Journal> reopened = Journal::OpenForWrite(dir);
    ASSERT_TRUE(reopened.ok()) << reopened.status().message();
    std::string text = *ReadFile(journal_path);
    ASSERT_TRUE(text.empty() || text.back() == '\n') << "torn tail left after open, round " << round;
    Result<std::vector<Event>> events = Journal::Read(dir);
    ASSERT_TRUE(events.ok()) << "round " << round << ": " << events.status().message();
    std::set<std::string> present;
    for (const Event& event : *events) present.insert(event.id);
    for (const std::string& id : acknowledged) ASSERT_TRUE(present.count(id)) << "lost acknowledged " << id;
  }
  EXPECT_GT(torn_rounds, 5);
  EXPECT_GE(kills_mid_append, rounds * 7 / 10) << "too few kills landed inside an append";
  EXPECT_GE(acknowledged.size(), 25u);
}

}  // namespace
}  // namespace capsule::journal
