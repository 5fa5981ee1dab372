// End-to-end tests of what the mount does with writes it cannot take, through real mounts and
// the shell commands people type: a write that can never become valid fails at write(2) (or
// its create), a document that can only be judged whole is refused at close with its bytes
// kept aside, the journal's unfinished line waits for its newline, an event over the limit is
// refused at write(2), and a writer waiting on a freeze can be killed; a freeze given a
// timeout thaws by itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <string>
#include <thread>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/local_files.h"
#include "fs/control_client.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::Shell;

std::string Slurp(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  return text.ok() ? *text : "<" + text.status().message() + ">";
}

// Waits up to `limit` for `done`, looking every 10 ms; whether it came.
template <typename Condition>
bool Within(std::chrono::milliseconds limit, Condition done) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

class MountWritesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("writes");
    dir_ = root_ + "/cap";
    mnt_ = root_ + "/mnt";
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    auto init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void ExpectVerifies() {
    auto verify = RunCapsule({"verify", dir_});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  }
  std::string Rejected(const std::string& rel) { return dir_ + "/" + local::kRejectedDir + "/" + rel; }
  // `capsule status MNT --json`'s state, or the control channel's count of waiting writes.
  std::string State() {
    auto status = RunCapsule({"status", mnt_, "--json"});
    Result<Json> json = ParseJson(status.out, "status");
    return json.ok() ? json->value("state", "") : "?";
  }
  int64_t WritesWaiting() {
    Result<std::string> socket = fs::FindControlSocket(mnt_);
    if (!socket.ok()) return -1;
    Result<Json> status = fs::SendControl(*socket, "status");
    return status.ok() ? status->value("writes_waiting", int64_t{-1}) : -1;
  }

  std::string root_, dir_, mnt_;
};

TEST_F(MountWritesTest, AShellWriteThatCanNeverBeValidFailsAtItsWrite) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string spec = mnt_ + "/environment/spec.json";
  const std::string old_spec = Slurp(spec);
  // Not JSON, and nothing written after it could make it JSON: the echo's write fails.
  EXPECT_NE(Shell("sh -c \"echo 'not json' > " + spec + "\" 2>/dev/null"), 0);
  EXPECT_EQ(Slurp(spec), old_spec);
  EXPECT_EQ(Slurp(dir_ + "/environment/spec.json"), old_spec);
  // Whole JSON with a trailing word: refused at the write that adds it, nothing of it kept.
  int fd = ::open(spec.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "{\"env\":{}}", 10), 10);
  EXPECT_EQ(::write(fd, " x", 2), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::close(fd), 0) << "the JSON written before the refused write is whole and valid";
  EXPECT_EQ(Slurp(spec), "{\"env\":{}}");

  // A name under schedule/ no content could make valid: refused at the create.
  EXPECT_NE(Shell("sh -c \"echo x > " + mnt_ + "/schedule/bogus.txt\" 2>/dev/null"), 0);
  EXPECT_FALSE(PathExists(mnt_ + "/schedule/bogus.txt"));
  EXPECT_FALSE(PathExists(dir_ + "/schedule/bogus.txt"));
  EXPECT_EQ(::open((mnt_ + "/schedule/bogus.txt").c_str(), O_WRONLY | O_CREAT, 0644), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::mkdir((mnt_ + "/schedule/elsewhere").c_str(), 0755), -1);
  EXPECT_EQ(errno, EINVAL);
  ASSERT_EQ(::mkdir((mnt_ + "/schedule/waiting").c_str(), 0755), 0);
  const std::string job = R"({"at":"2026-12-04T08:00:00Z","id":"mail","prompt":"read the mail"})";
  ASSERT_EQ(Put(mnt_ + "/schedule/waiting/mail.json", job), 0);
  EXPECT_EQ(::rename((mnt_ + "/schedule/waiting/mail.json").c_str(), (mnt_ + "/schedule/mail.txt").c_str()), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Slurp(mnt_ + "/schedule/waiting/mail.json"), job);
  // A job that is JSON but not a job: refused at the write that completes it.
  EXPECT_NE(Shell("sh -c \"echo '{\\\"id\\\":\\\"mail\\\"}' > " + mnt_ + "/schedule/waiting/mail.json\" 2>/dev/null"), 0);
  EXPECT_EQ(Slurp(mnt_ + "/schedule/waiting/mail.json"), job);
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

// A thread file's name is checked when the file is created, as a schedule file's is: a name
// no content could make valid fails the create with EINVAL, and nothing is left behind.
TEST_F(MountWritesTest, AThreadFileWithABadNameIsRefusedAtItsCreate) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string threads = mnt_ + "/harness/threads";
  ASSERT_EQ(Shell("mkdir -p " + threads), 0);
  for (const char* bad : {"bad name.json", ".hidden.json", "notes.txt", ".json"}) {
    const std::string path = threads + "/" + bad;
    EXPECT_EQ(::open(path.c_str(), O_WRONLY | O_CREAT, 0644), -1) << bad;
    EXPECT_EQ(errno, EINVAL) << bad;
    EXPECT_FALSE(PathExists(path)) << bad;
    EXPECT_FALSE(PathExists(dir_ + "/harness/threads/" + bad)) << bad;
  }
  EXPECT_NE(Shell("sh -c \"echo '{}' > '" + threads + "/bad name.json'\" 2>/dev/null"), 0);
  EXPECT_FALSE(PathExists(threads + "/bad name.json"));
  ASSERT_EQ(Put(threads + "/research.json", "{}"), 0);
  EXPECT_EQ(Slurp(threads + "/research.json"), "{}");
  EXPECT_EQ(mount.Unmount(), 0);
  EXPECT_EQ(Slurp(dir_ + "/harness/threads/research.json"), "{}");
  ExpectVerifies();
}

TEST_F(MountWritesTest, ADocumentOnlyJudgedWholeIsRefusedAtCloseAndItsBytesAreKeptAside) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string spec = mnt_ + "/environment/spec.json";
  const std::string old_spec = Slurp(spec);
  // JSON so far, never finished: fsync and close fail, the old spec stays, the bytes are kept.
  int fd = ::open(spec.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "{\"env\":", 7), 7);
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Slurp(Rejected("environment/spec.json")), "{\"env\":");
  EXPECT_EQ(::close(fd), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Slurp(spec), old_spec);
  // The shell cannot see close(2) fail: the bytes are still there to find.
  EXPECT_EQ(Shell("sh -c \"printf '{\\\"env\\\":{\\\"LANG\\\":' > " + spec + "\""), 0);
  EXPECT_EQ(Slurp(spec), old_spec);
  EXPECT_EQ(Slurp(Rejected("environment/spec.json")), "{\"env\":{\"LANG\":");
  // A good version afterwards is taken, and the refused copy goes with it.
  EXPECT_EQ(Put(spec, "{\"env\":{\"LANG\":\"C\"}}"), 0);
  EXPECT_EQ(Slurp(spec), "{\"env\":{\"LANG\":\"C\"}}");
  EXPECT_FALSE(PathExists(Rejected("environment/spec.json")));

  // An attachment's bytes can only be judged whole, against the digest its name says.
  const std::string zeros(64, '0');
  const std::string attachment = mnt_ + "/memory/attachments/" + zeros;
  if (!PathExists(mnt_ + "/memory/attachments")) {
    ASSERT_EQ(::mkdir((mnt_ + "/memory/attachments").c_str(), 0755), 0);
  }
  EXPECT_EQ(Put(attachment, "hi\n"), EINVAL);
  EXPECT_EQ(Slurp(attachment), "") << "created, not written: the refused bytes are not under its name";
  EXPECT_EQ(Slurp(Rejected("memory/attachments/" + zeros)), "hi\n");
  EXPECT_EQ(Shell("sh -c \"echo again > " + attachment + "\""), 0);
  EXPECT_EQ(Slurp(Rejected("memory/attachments/" + zeros)), "again\n");
  EXPECT_EQ(Slurp(attachment), "");
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
  EXPECT_EQ(Slurp(dir_ + "/environment/spec.json"), "{\"env\":{\"LANG\":\"C\"}}");
}

TEST_F(MountWritesTest, AJournalLineWithoutItsNewlineWaitsForTheNextWrite) {
  const std::string journal = mnt_ + "/memory/timeline_events.jsonl";
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    const std::string before = Slurp(journal);
    // The first half through one shell, the rest through another: one event.
    EXPECT_EQ(Shell("sh -c \"printf '{\\\"type\\\":\\\"user_message\\\",' >> " + journal + "\""), 0);
    EXPECT_EQ(Slurp(journal), before) << "not yet: no newline";
    EXPECT_EQ(Shell("sh -c \"printf '\\\"data\\\":{\\\"text\\\":\\\"joined\\\"}}\\n' >> " + journal + "\""), 0);
    const std::string joined = Slurp(journal);
    EXPECT_NE(joined.find("\"text\":\"joined\""), std::string::npos) << joined;
    EXPECT_EQ(joined.find("\"text\":\"joined\""), joined.rfind("\"text\":\"joined\""));
    // A start no object has: refused at the write, and the next line is not held up by it.
    EXPECT_NE(Shell("sh -c \"printf 'not json' >> " + journal + "\" 2>/dev/null"), 0);
    EXPECT_EQ(Put(journal, "{\"type\":\"user_message\",\"data\":{\"text\":\"next\"}}\n", O_WRONLY | O_APPEND), 0);
    const std::string after = Slurp(journal);
    EXPECT_NE(after.find("\"text\":\"next\""), std::string::npos) << after;
    // An unfinished line left at unmount is kept aside.
    EXPECT_EQ(Put(journal, "{\"type\":\"user_message\",\"data\":{\"te", O_WRONLY | O_APPEND), 0);
    EXPECT_EQ(mount.Unmount(), 0);
    EXPECT_EQ(Slurp(dir_ + "/memory/timeline_events.jsonl"), after);
  }
  EXPECT_EQ(Slurp(Rejected("memory/timeline_events.jsonl")), "{\"type\":\"user_message\",\"data\":{\"te");
  auto log = RunCapsule({"log", dir_});
  EXPECT_NE(log.out.find("joined"), std::string::npos) << log.out;
  ExpectVerifies();
}

TEST_F(MountWritesTest, AJournalLineOverTheLimitIsRefusedAtItsWrite) {
  const std::string journal = mnt_ + "/memory/timeline_events.jsonl";
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string before = Slurp(journal);
  int fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  // 16 MiB of line is taken in pieces (each write one request); the write past it is refused.
  const std::string head = "{\"type\":\"user_message\",\"data\":{\"text\":\"";
  const size_t limit = size_t{16} << 20;
  ASSERT_EQ(::write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  const std::string piece(1 << 20, 'a');
  size_t line = head.size();
  int refused_errno = 0;
  bool cut_short = false;
  while (line <= limit + piece.size()) {
    ssize_t n = ::write(fd, piece.data(), piece.size());
    if (n < 0) {
      refused_errno = errno;
      break;
    }
    line += static_cast<size_t>(n);
    // The kernel ends a request at a page boundary of the buffer: when the limit falls in a
    // write's second request, the write returns what its first took.
    if (static_cast<size_t>(n) < piece.size()) {
      cut_short = true;
      break;
    }
  }
  if (!cut_short) {
    EXPECT_EQ(refused_errno, EFBIG);
  }
  EXPECT_GT(line + piece.size(), limit) << "refused only past 16 MiB";
  EXPECT_LE(line, limit);
  // Finished now or not, that line is dropped: the newline alone starts nothing.
  EXPECT_EQ(::write(fd, "\"}}\n", 4), -1);
  EXPECT_EQ(errno, EINVAL);
  ::close(fd);
  EXPECT_EQ(Slurp(journal), before);
  // One write(2) holding a whole line over the limit reaches the driver in pieces of 1 MiB:
  // it stops short at the limit, and the rest, written again, is refused.
  fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  const std::string huge = head + std::string(limit, 'b') + "\"}}\n";
  ssize_t taken = ::write(fd, huge.data(), huge.size());
  ASSERT_LT(taken, static_cast<ssize_t>(huge.size()));
  if (taken >= 0) {
    EXPECT_EQ(::write(fd, huge.data() + taken, huge.size() - static_cast<size_t>(taken)), -1);
    EXPECT_TRUE(errno == EINVAL || errno == EFBIG) << errno;
  }
  ::close(fd);
  EXPECT_EQ(Slurp(journal), before);
  EXPECT_EQ(Put(journal, "{\"type\":\"user_message\",\"data\":{\"text\":\"small\"}}\n", O_WRONLY | O_APPEND), 0);
  EXPECT_NE(Slurp(journal).find("\"small\""), std::string::npos);
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

// A process whose write waits on a freeze: it forks, writes `data` through the already open
// `fd` and exits 0 when that write succeeded, 3 when it failed with EINTR.
pid_t BlockedWriter(int fd, bool catch_usr1) {
  pid_t child = ::fork();
  if (child == 0) {
    if (catch_usr1) {
      struct sigaction action {};
      action.sa_handler = [](int) {};
      ::sigaction(SIGUSR1, &action, nullptr);  // no SA_RESTART: the write returns EINTR
    }
    ssize_t n = ::write(fd, "later", 5);
    ::_exit(n == 5 ? 0 : (errno == EINTR ? 3 : 4));
  }
  return child;
}

// The child's wait status within `limit`, or -1 when it has not ended by then.
int EndsWithin(pid_t child, std::chrono::milliseconds limit) {
  int status = -1;
  bool ended = Within(limit, [&] { return ::waitpid(child, &status, WNOHANG) == child; });
  return ended ? status : -1;
}

TEST_F(MountWritesTest, AWriterWaitingOnAFreezeCanBeKilledAndInterrupted) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string file = mnt_ + "/files/doc.txt";
  ASSERT_EQ(Put(file, "before"), 0);
  int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  ASSERT_EQ(WritesWaiting(), 0);

  // kill -9 of a writer that waits for the thaw: it ends at once, the mount serves on.
  pid_t killed = BlockedWriter(fd, false);
  ASSERT_TRUE(Within(std::chrono::seconds(10), [&] { return WritesWaiting() == 1; })) << "the writer never waited";
  ASSERT_EQ(::kill(killed, SIGKILL), 0);
  int status = EndsWithin(killed, std::chrono::seconds(1));
  ASSERT_NE(status, -1) << "a writer waiting on a freeze outlived SIGKILL by a second";
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_TRUE(Within(std::chrono::seconds(2), [&] { return WritesWaiting() == 0; })) << "the wait was not released";

  // A signal the writer handles (as a shell's Ctrl-C does) ends its write with EINTR.
  pid_t interrupted = BlockedWriter(fd, true);
  ASSERT_TRUE(Within(std::chrono::seconds(10), [&] { return WritesWaiting() == 1; }));
  ASSERT_EQ(::kill(interrupted, SIGUSR1), 0);
  status = EndsWithin(interrupted, std::chrono::seconds(1));
  ASSERT_NE(status, -1) << "an interrupted write kept waiting";
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 3) << status;

  // The mount serves on: reads while frozen, writes after the thaw.
  EXPECT_EQ(Slurp(file), "before");
  EXPECT_EQ(State(), "frozen");
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  ::close(fd);
  EXPECT_EQ(Put(file, "after"), 0);
  EXPECT_EQ(Slurp(file), "after");
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

TEST_F(MountWritesTest, AFreezeWithATimeoutThawsByItself) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  auto bad = RunCapsule({"freeze", mnt_, "--timeout", "5x"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("must be a duration such as 90s, 10m, 2h or 1d"), std::string::npos) << bad.err;
  EXPECT_EQ(RunCapsule({"freeze", mnt_, "--timeout", "0s"}).exit_code, 2);
  EXPECT_EQ(State(), "active");

  ASSERT_EQ(Put(mnt_ + "/files/late.txt", "before"), 0);
  auto frozen = RunCapsule({"freeze", mnt_, "--timeout", "1s"});
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  EXPECT_NE(frozen.out.find("state frozen"), std::string::npos) << frozen.out;
  // A writer that waits meanwhile goes on once the freeze ends by itself.
  std::thread writer([&] { EXPECT_EQ(Put(mnt_ + "/files/late.txt", "x", O_WRONLY | O_TRUNC), 0); });
  EXPECT_TRUE(Within(std::chrono::seconds(10), [&] { return State() == "active"; })) << "the freeze never ended";
  writer.join();
  EXPECT_EQ(Slurp(mnt_ + "/files/late.txt"), "x");
  // The control channel refuses a timeout out of range, naming the range.
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok());
  Result<Json> zero = fs::SendControl(*socket, "freeze timeout=0");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("a timeout is 1 to 2592000 seconds"), std::string::npos) << zero.status().message();
  EXPECT_EQ(State(), "active");
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

}  // namespace
}  // namespace capsule
