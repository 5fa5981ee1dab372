// End-to-end tests of capsulefs against a real mount: ./capsulefs DIR MNT -f in a child, the
// POSIX operations of files/, atomic writes, the environment check, freeze, thaw, retire and
// crash recovery. Every capsule must verify (./capsule verify) after unmount.
#include <dirent.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "capsule/format/manifest.h"
#include "fs/control_client.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"
#include "tests/poll.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;
using testing::WaitUntil;

using testing::IsMounted;
using testing::Mount;
using testing::Put;

std::string Slurp(const std::string& path) {
  Result<std::string> text = ReadFile(path);
  return text.ok() ? *text : "<" + text.status().message() + ">";
}


// How many writes the mount at `mnt` holds waiting for a thaw now (its control channel's
// status), -1 when it does not answer: a writer counted there is inside its call, waiting.
int WritesWaiting(const std::string& mnt) {
  Result<std::string> socket = fs::FindControlSocket(mnt);
  if (!socket.ok()) return -1;
  Result<Json> status = fs::SendControl(*socket, "status");
  if (!status.ok() || !status->contains("writes_waiting")) return -1;
  return (*status)["writes_waiting"].get<int>();
}

// Whether process `pid` is blocked in a FUSE request, waiting for the driver's answer.
bool WaitsForFuseAnswer(pid_t pid) {
  Result<std::string> wchan = ReadFile("/proc/" + std::to_string(pid) + "/wchan");
  return wchan.ok() && (wchan->find("request_wait_answer") != std::string::npos || wchan->find("fuse") != std::string::npos);
}

class CapsulefsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("fs");
    dir_ = root_ + "/cap";
    mnt_ = root_ + "/mnt";
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/src").ok());
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/main.py", "print('hi')\n").ok());
    auto init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", ws});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void ExpectVerifies() {
    auto verify = RunCapsule({"verify", dir_});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  }
  std::string F(const std::string& rel) { return mnt_ + "/files/" + rel; }

  // Whether a stat of `path`, in a child of its own, is answered while the driver is stopped
  // (from the kernel's caches): found with content when `found`, else missing (ENOENT). Not
  // answered means the child was seen blocked in a FUSE request, waiting for the stopped
  // driver. Stops the driver and lets it go on.
  static bool AnsweredWhileStopped(const Mount& mount, const std::string& path, bool found) {
    if (::kill(mount.pid(), SIGSTOP) != 0) return false;
    pid_t child = ::fork();
    if (child == 0) {
      struct stat child_st;
      int got = ::stat(path.c_str(), &child_st);
      ::_exit(found ? (got == 0 && child_st.st_size > 0 ? 0 : 1) : (got != 0 && errno == ENOENT ? 0 : 1));
    }
    bool answered = false;
    int status = 0;
    const bool seen = WaitUntil(
        [&] {
          answered = ::waitpid(child, &status, WNOHANG) == child;
          return answered || WaitsForFuseAnswer(child);
        },
        60);
    EXPECT_TRUE(seen) << "the stat neither ended nor waited for the driver";
    ::kill(mount.pid(), SIGCONT);
    if (!answered) ::waitpid(child, &status, 0);
    return answered && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }

  std::string root_, dir_, mnt_;
};

TEST_F(CapsulefsTest, TheViewShowsEveryCapsuleFileAndHidesTheLocalFolder) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  EXPECT_EQ(Slurp(F("README.md")), "# sample\n");
  EXPECT_EQ(Slurp(F("src/main.py")), "print('hi')\n");
  EXPECT_TRUE(PathExists(mnt_ + "/memory/working_memory.md"));
  EXPECT_TRUE(PathExists(mnt_ + "/environment/spec.json"));
  EXPECT_FALSE(PathExists(mnt_ + "/.capsule"));
  EXPECT_EQ(Slurp(mnt_ + "/artifacts/snapshot.json"), Slurp(dir_ + "/artifacts/snapshot.json"));
  ASSERT_EQ(Put(F("new.txt"), "fresh\n"), 0);
  // manifest.json and snapshot.json are rendered from the live state.
  std::string manifest = Slurp(mnt_ + "/manifest.json");
  std::string snapshot = Slurp(mnt_ + "/artifacts/snapshot.json");
  EXPECT_NE(snapshot.find("new.txt"), std::string::npos);
  EXPECT_NE(manifest.find("artifacts/snapshot.json"), std::string::npos);
  // Read-only where it must be.
  EXPECT_EQ(Put(mnt_ + "/manifest.json", "{}"), EACCES);
  EXPECT_EQ(Put(mnt_ + "/artifacts/snapshot.json", "{}"), EACCES);
  EXPECT_EQ(Put(mnt_ + "/memory/timeline_events.jsonl", "{}\n", O_WRONLY | O_APPEND), EINVAL);  // no type
  EXPECT_EQ(::truncate((mnt_ + "/memory/timeline_events.jsonl").c_str(), 0), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::unlink((mnt_ + "/memory/timeline_events.jsonl").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(::rename((mnt_ + "/memory/timeline_events.jsonl").c_str(), (mnt_ + "/memory/x").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  // Read-write capsule files.
  ASSERT_EQ(Put(mnt_ + "/memory/working_memory.md", "# notes\nremember this\n"), 0);
  EXPECT_EQ(Slurp(mnt_ + "/memory/working_memory.md"), "# notes\nremember this\n");
  ASSERT_EQ(::mkdir((mnt_ + "/schedule/waiting").c_str(), 0755), 0);
  const std::string job = R"({"at":"2026-12-04T08:00:00Z","id":"job1","prompt":"look"})";
  ASSERT_EQ(Put(mnt_ + "/schedule/waiting/job1.json", job), 0);
  EXPECT_EQ(Slurp(mnt_ + "/schedule/waiting/job1.json"), job);
  EXPECT_EQ(Put(mnt_ + "/schedule/waiting/job1.json", "{\"at\":1}"), EINVAL);  // checked as written
  EXPECT_EQ(Slurp(mnt_ + "/schedule/waiting/job1.json"), job);
  EXPECT_EQ(mount.Unmount(), 0);
  EXPECT_EQ(Slurp(dir_ + "/memory/working_memory.md"), "# notes\nremember this\n");
  ExpectVerifies();
}

// An attachment is named by its content's digest, through the mount as in verify: a name
// that is not a digest is refused at create (or rename), bytes that do not match the name at
// the commit (the old content stays), and `capsule attach` through the mount stores one that
// the capsule verifies with after the unmount.
TEST_F(CapsulefsTest, AttachmentsThroughTheMountAreNamedByTheirDigest) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string dir = mnt_ + "/memory/attachments/";
  if (!PathExists(dir)) {
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  }
  const std::string hello = Sha256Hex("hello\n");
  EXPECT_EQ(Put(dir + "notes.txt", "x"), EPERM);
  EXPECT_EQ(::mkdir((dir + "sub").c_str(), 0755), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(Put(dir + hello, "not hello\n"), EINVAL);
  EXPECT_EQ(Slurp(dir + hello), "") << "the refused bytes are not kept";
  EXPECT_EQ(Put(dir + hello, "hello\n"), 0);
  EXPECT_EQ(Slurp(dir + hello), "hello\n");
  // Renamed: only to the digest of what it holds.
  const std::string other = Sha256Hex("other\n");
  ASSERT_EQ(Put(dir + other, "other\n"), 0);
  EXPECT_EQ(::rename((dir + other).c_str(), (dir + Sha256Hex("third\n")).c_str()), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::rename((dir + other).c_str(), (dir + "other.txt").c_str()), -1);
  EXPECT_EQ(errno, EPERM);
  EXPECT_EQ(Slurp(dir + other), "other\n");
  ASSERT_TRUE(WriteFileAtomic(root_ + "/chart.txt", "a chart\n").ok());
  auto attached = RunCapsule({"attach", mnt_, root_ + "/chart.txt"});
  ASSERT_EQ(attached.exit_code, 0) << attached.err;
  EXPECT_EQ(Slurp(dir + Sha256Hex("a chart\n")), "a chart\n");
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

TEST_F(CapsulefsTest, FilesBehavesAsPosix) {
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    // create, write at any offset, read
    ASSERT_EQ(Put(F("a.txt"), "0123456789"), 0);
    int fd = ::open(F("a.txt").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::pwrite(fd, "AB", 2, 4), 2);
    ASSERT_EQ(::pwrite(fd, "Z", 1, 12), 1);  // past the end: a hole
    char buf[32] = {};
    ASSERT_EQ(::pread(fd, buf, sizeof(buf), 0), 13);
    EXPECT_EQ(std::string(buf, 13), std::string("0123AB6789\0\0Z", 13));
    ASSERT_EQ(::fsync(fd), 0);
    EXPECT_EQ(Slurp(F("a.txt")), std::string("0123AB6789\0\0Z", 13));  // visible after fsync
    ASSERT_EQ(::ftruncate(fd, 3), 0);
    ASSERT_EQ(::close(fd), 0);
    EXPECT_EQ(Slurp(F("a.txt")), "012");
    ASSERT_EQ(::truncate(F("a.txt").c_str(), 1), 0);
    EXPECT_EQ(Slurp(F("a.txt")), "0");
    // O_APPEND
    ASSERT_EQ(Put(F("a.txt"), "12", O_WRONLY | O_APPEND), 0);
    EXPECT_EQ(Slurp(F("a.txt")), "012");
    // rename, over an existing file too; RENAME_NOREPLACE; RENAME_EXCHANGE is refused
    ASSERT_EQ(Put(F("b.txt"), "bee"), 0);
    ASSERT_EQ(::rename(F("a.txt").c_str(), F("c.txt").c_str()), 0);
    EXPECT_FALSE(PathExists(F("a.txt")));
    ASSERT_EQ(::rename(F("c.txt").c_str(), F("b.txt").c_str()), 0);
    EXPECT_EQ(Slurp(F("b.txt")), "012");
    ASSERT_EQ(Put(F("d.txt"), "dee"), 0);
    EXPECT_EQ(::renameat2(AT_FDCWD, F("d.txt").c_str(), AT_FDCWD, F("b.txt").c_str(), RENAME_NOREPLACE), -1);
    EXPECT_EQ(errno, EEXIST);
    EXPECT_EQ(::renameat2(AT_FDCWD, F("d.txt").c_str(), AT_FDCWD, F("b.txt").c_str(), RENAME_EXCHANGE), -1);
    EXPECT_EQ(errno, EINVAL);
    EXPECT_EQ(::renameat2(AT_FDCWD, F("d.txt").c_str(), AT_FDCWD, F("e.txt").c_str(), RENAME_NOREPLACE), 0);
    // unlink: an open file stays readable until closed
    int open_fd = ::open(F("e.txt").c_str(), O_RDONLY);
    ASSERT_GE(open_fd, 0);
    ASSERT_EQ(::unlink(F("e.txt").c_str()), 0);
    EXPECT_FALSE(PathExists(F("e.txt")));
    ASSERT_EQ(::pread(open_fd, buf, sizeof(buf), 0), 3);
    EXPECT_EQ(std::string(buf, 3), "dee");
    ::close(open_fd);
    // folders
    ASSERT_EQ(::mkdir(F("dir").c_str(), 0750), 0);
    EXPECT_EQ(::mkdir(F("dir").c_str(), 0750), -1);
    EXPECT_EQ(errno, EEXIST);
    ASSERT_EQ(Put(F("dir/inner"), "in"), 0);
    EXPECT_EQ(::rmdir(F("dir").c_str()), -1);
    EXPECT_EQ(errno, ENOTEMPTY);
    ASSERT_EQ(::rename(F("dir").c_str(), F("moved").c_str()), 0);
    EXPECT_EQ(Slurp(F("moved/inner")), "in");
    ASSERT_EQ(::unlink(F("moved/inner").c_str()), 0);
    ASSERT_EQ(::rmdir(F("moved").c_str()), 0);
    // links
    ASSERT_EQ(::symlink("b.txt", F("link").c_str()), 0);
    char target[64] = {};
    ASSERT_EQ(::readlink(F("link").c_str(), target, sizeof(target)), 5);
    EXPECT_STREQ(target, "b.txt");
    EXPECT_EQ(Slurp(F("link")), "012");
    // chmod, utimens, statfs
    ASSERT_EQ(::chmod(F("b.txt").c_str(), 0600), 0);
    struct stat st;
    ASSERT_EQ(::stat(F("b.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    struct timespec times[2] = {{1000000000, 0}, {1000000000, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, F("b.txt").c_str(), times, 0), 0);
    ASSERT_EQ(::stat(F("b.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
    struct statvfs vfs;
    ASSERT_EQ(::statvfs(F("").c_str(), &vfs), 0);
    EXPECT_EQ(vfs.f_flag & ST_RDONLY, 0u);
    // a large folder, read with offsets
    ASSERT_EQ(::mkdir(F("big").c_str(), 0755), 0);
    for (int i = 0; i < 400; ++i) ASSERT_EQ(Put(F("big/f" + std::to_string(i)), std::to_string(i)), 0);
    DIR* dir = ::opendir(F("big").c_str());
    ASSERT_NE(dir, nullptr);
    int count = 0;
    while (struct dirent* d = ::readdir(dir)) count += d->d_name[0] != '.';
    ::closedir(dir);
    EXPECT_EQ(count, 400);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ExpectVerifies();
  // Everything is there after a remount.
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  EXPECT_EQ(Slurp(F("b.txt")), "012");
  EXPECT_EQ(Slurp(F("big/f399")), "399");
  struct stat st;
  ASSERT_EQ(::lstat(F("link").c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(::stat(F("b.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
}

// A writer sees its own writes at once through fstat and stat, as on ext4: after write, after
// ftruncate, and after futimens on the still-open descriptor then close (what every tar -x
// does; git add then committed such files empty). A truncate by path takes now as its mtime,
// kept across a remount.
TEST_F(CapsulefsTest, AWriterSeesItsOwnSizeAndTimesAtOnce) {
  struct stat st;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    int fd = ::open(F("w.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "abc", 3), 3);
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, 3);
    ASSERT_EQ(::ftruncate(fd, 10), 0);
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_EQ(st.st_size, 10);
    ASSERT_EQ(::stat(F("w.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 10) << "another path to the same file sees the writer's size";
    struct timespec times[2] = {{1700000000, 0}, {1700000000, 0}};
    ASSERT_EQ(::futimens(fd, times), 0);
    ASSERT_EQ(::fstat(fd, &st), 0);
    EXPECT_GT(st.st_ctim.tv_sec, 1700000000) << "utimens sets the mtime back and the ctime to now";
    struct timespec ctime_before_close = st.st_ctim;
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::lstat(F("w.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 10) << "the futimens reply must not carry the size from before the writes";
    EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
    EXPECT_GT(st.st_ctim.tv_sec, 1700000000);
    // Asked of the driver, not of the kernel's attribute cache (AT_STATX_FORCE_SYNC).
    struct statx sx;
    ASSERT_EQ(::statx(AT_FDCWD, F("w.txt").c_str(), AT_SYMLINK_NOFOLLOW | AT_STATX_FORCE_SYNC, STATX_CTIME, &sx), 0);
    EXPECT_EQ(sx.stx_ctime.tv_sec, ctime_before_close.tv_sec) << "the commit at close is no change of its own";
    EXPECT_EQ(sx.stx_ctime.tv_nsec, ctime_before_close.tv_nsec);

    ASSERT_EQ(Put(F("t.txt"), "0123456789"), 0);
    ASSERT_EQ(::truncate(F("t.txt").c_str(), 5), 0);
    ASSERT_EQ(::stat(F("t.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_size, 5);
    EXPECT_GT(st.st_mtim.tv_sec, 1700000000) << "a truncate's mtime is now, not 1970";
  }
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  ASSERT_EQ(::stat(F("t.txt").c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1700000000);
  ASSERT_EQ(::stat(F("w.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 10);
  EXPECT_EQ(st.st_mtim.tv_sec, 1700000000);
}

// Every open of a file sees its writes at once, as on ext4: a descriptor opened before the
// write, one opened after, a reader that had already read the old content, and stat.
TEST_F(CapsulefsTest, EveryOpenSeesTheWritesAtOnce) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("f.txt"), "old!"), 0);
  int early_reader = ::open(F("f.txt").c_str(), O_RDONLY);
  ASSERT_GE(early_reader, 0);
  char buffer[16] = {};
  ASSERT_EQ(::pread(early_reader, buffer, sizeof buffer, 0), 4);
  int writer = ::open(F("f.txt").c_str(), O_RDWR);
  ASSERT_GE(writer, 0);
  ASSERT_EQ(::pwrite(writer, "new content", 11, 0), 11);
  std::memset(buffer, 0, sizeof buffer);
  EXPECT_EQ(::pread(early_reader, buffer, sizeof buffer, 0), 11);
  EXPECT_STREQ(buffer, "new content") << "a reader opened before the write";
  EXPECT_EQ(Slurp(F("f.txt")), "new content") << "a reader opened after it";
  struct stat st;
  ASSERT_EQ(::stat(F("f.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 11);
  // A second writer writes into the same file, not a copy of its own.
  int second = ::open(F("f.txt").c_str(), O_WRONLY);
  ASSERT_GE(second, 0);
  ASSERT_EQ(::pwrite(second, "N", 1, 0), 1);
  std::memset(buffer, 0, sizeof buffer);
  EXPECT_EQ(::pread(writer, buffer, sizeof buffer, 0), 11);
  EXPECT_STREQ(buffer, "New content");
  ASSERT_EQ(::close(second), 0);  // a commit; the first writer writes on
  ASSERT_EQ(::pwrite(writer, "!", 1, 11), 1);
  ASSERT_EQ(::close(writer), 0);
  std::memset(buffer, 0, sizeof buffer);
  EXPECT_EQ(::pread(early_reader, buffer, sizeof buffer, 0), 12);
  EXPECT_STREQ(buffer, "New content!") << "a reader that read an earlier commit";
  ::close(early_reader);
}

// The workspace changes only through the mount, so the kernel keeps what it learned of its
// entries (and drops it for each change it passes on, which the tests above check): a stat of
// an unchanged file, long after it was looked up, is answered with the driver stopped. The
// capsule's own files change beside the mount too and are asked for again after a second.
TEST_F(CapsulefsTest, TheKernelKeepsWorkspaceEntriesAndAsksAgainForTheCapsulesOwn) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("kept.txt"), "kept"), 0);
  struct stat st;
  ASSERT_EQ(::stat(F("kept.txt").c_str(), &st), 0);
  ASSERT_EQ(::stat((mnt_ + "/memory/working_memory.md").c_str(), &st), 0);
  // Twice the capsule file's second, and it is looked at first. A loaded machine (CI's ASan
  // run beside the rest) has kept it past two seconds twice in many runs: it is looked at
  // again, up to three times two seconds, where the workspace's hour would keep it throughout.
  bool kept = true;
  for (int look = 0; look < 3 && kept; ++look) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2000));
    kept = AnsweredWhileStopped(mount, mnt_ + "/memory/working_memory.md", true);
  }
  EXPECT_FALSE(kept) << "a capsule file's were kept";
  EXPECT_TRUE(AnsweredWhileStopped(mount, F("kept.txt"), true)) << "a workspace file's attributes were asked for again";
  ASSERT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

// A name missing from a workspace folder is remembered by the kernel (a negative entry) until
// an operation through the mount adds it, whichever operation; a name missing from the
// capsule's own folders is asked for each time (capsule commands write them beside the mount).
TEST_F(CapsulefsTest, AMissingWorkspaceNameIsRememberedUntilTheMountAddsIt) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  struct stat st;
  auto missing = [&](const std::string& path) { return ::lstat(path.c_str(), &st) != 0 && errno == ENOENT; };
  ASSERT_TRUE(missing(F("src/later.py")));
  EXPECT_TRUE(AnsweredWhileStopped(mount, F("src/later.py"), false)) << "the driver was asked again";

  // Each way of adding a name, each after the name was found missing.
  const std::vector<std::string> names = {"created", "folder", "symlink", "hardlink", "renamed", "fifo", "later.py"};
  for (const std::string& name : names) ASSERT_TRUE(missing(F("src/" + name))) << name;
  ASSERT_EQ(Put(F("src/created"), "created"), 0);
  ASSERT_EQ(::mkdir(F("src/folder").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("created", F("src/symlink").c_str()), 0);
  ASSERT_EQ(::link(F("src/created").c_str(), F("src/hardlink").c_str()), 0);
  ASSERT_EQ(Put(F("moving"), "moved"), 0);
  ASSERT_EQ(::rename(F("moving").c_str(), F("src/renamed").c_str()), 0);
  ASSERT_EQ(::mkfifo(F("src/fifo").c_str(), 0644), 0);
  ASSERT_EQ(Put(F("src/later.py"), "print('later')\n"), 0);
  for (const std::string& name : names) EXPECT_EQ(::lstat(F("src/" + name).c_str(), &st), 0) << name;
  EXPECT_EQ(Slurp(F("src/renamed")), "moved");
  EXPECT_TRUE(AnsweredWhileStopped(mount, F("src/later.py"), true));
  // Removed again: missing again, at once.
  ASSERT_EQ(::unlink(F("src/later.py").c_str()), 0);
  EXPECT_TRUE(missing(F("src/later.py")));

  // The capsule's own folder: a file written beside the mount is found at once.
  ASSERT_TRUE(missing(mnt_ + "/memory/beside.md"));
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/memory/beside.md", "written beside").ok());
  EXPECT_EQ(Slurp(mnt_ + "/memory/beside.md"), "written beside");
  ASSERT_EQ(::unlink((dir_ + "/memory/beside.md").c_str()), 0);

  ASSERT_EQ(mount.Unmount(), 0);
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  for (const std::string& name : names) {
    if (name != "later.py") {
      EXPECT_EQ(::lstat(F("src/" + name).c_str(), &st), 0) << name;
    }
  }
  ASSERT_EQ(again.Unmount(), 0);
  ExpectVerifies();
}

// A name the snapshot cannot hold (not UTF-8) is refused by every operation that adds one,
// before anything changes: nothing is listed, the mount checkpoints and the capsule verifies.
TEST_F(CapsulefsTest, ANameThatIsNotUtf8IsRefusedAndLeavesNothing) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string bad = "bad\xff";
  ASSERT_EQ(Put(F("src/good"), "good"), 0);
  struct stat st;
  auto refused = [&](int result, const std::string& what) {
    EXPECT_EQ(result, -1) << what;
    EXPECT_EQ(errno, EINVAL) << what;
    EXPECT_NE(::lstat(F("src/" + bad).c_str(), &st), 0) << what << " left the name";
  };
  refused(::open(F("src/" + bad).c_str(), O_CREAT | O_WRONLY, 0644), "create");
  refused(::mkdir(F("src/" + bad).c_str(), 0755), "mkdir");
  refused(::mkfifo(F("src/" + bad).c_str(), 0644), "mkfifo");
  refused(::symlink("good", F("src/" + bad).c_str()), "symlink");
  refused(::link(F("src/good").c_str(), F("src/" + bad).c_str()), "link");
  refused(::rename(F("src/good").c_str(), F("src/" + bad).c_str()), "rename");
  EXPECT_EQ(::symlink(("to-" + bad).c_str(), F("src/link").c_str()), -1) << "a link whose target is not UTF-8";
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(Slurp(F("src/good")), "good");
  EXPECT_NE(::lstat(F("src/link").c_str(), &st), 0);
  std::set<std::string> listed;
  DIR* dir = ::opendir(F("src").c_str());
  ASSERT_NE(dir, nullptr);
  while (struct dirent* entry = ::readdir(dir)) listed.insert(entry->d_name);
  ::closedir(dir);
  EXPECT_EQ(listed, (std::set<std::string>{".", "..", "good", "main.py"}));
  auto freeze = RunCapsule({"freeze", mnt_});
  EXPECT_EQ(freeze.exit_code, 0) << freeze.err;
  auto thaw = RunCapsule({"thaw", mnt_});
  EXPECT_EQ(thaw.exit_code, 0) << thaw.err;
  ASSERT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

// A file written in order from its start is hashed beside its writes (each write is answered
// before it is hashed, and the next may be hashed on another thread): the blob it commits to
// is named by its content's digest, whoever wrote which part.
TEST_F(CapsulefsTest, AFileWrittenInOrderIsCommittedUnderItsContentsDigest) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  std::mt19937_64 random(7);
  std::string content(48u << 20, '\0');
  for (size_t i = 0; i < content.size(); i += 8) {
    uint64_t word = random();
    std::memcpy(&content[i], &word, 8);
  }
  // One writer, 1 MiB at a time, and a last write of an odd size.
  content.resize(content.size() - 12345);
  int fd = ::open(F("big.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  for (size_t off = 0; off < content.size(); off += 1u << 20) {
    size_t n = std::min<size_t>(1u << 20, content.size() - off);
    ASSERT_EQ(::write(fd, content.data() + off, n), static_cast<ssize_t>(n));
  }
  ASSERT_EQ(::close(fd), 0);
  // Two threads taking turns on one descriptor, in file order.
  std::string other = content.substr(0, 16u << 20);
  std::reverse(other.begin(), other.end());
  int shared = ::open(F("turns.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(shared, 0);
  std::mutex mu;
  std::condition_variable turn;
  size_t next = 0;
  constexpr size_t kChunk = 256u << 10;
  auto take_turns = [&](size_t parity) {
    for (;;) {
      std::unique_lock lock(mu);
      turn.wait(lock, [&] { return next >= other.size() || (next / kChunk) % 2 == parity; });
      if (next >= other.size()) return;
      ssize_t n = ::pwrite(shared, other.data() + next, kChunk, static_cast<off_t>(next));
      if (n != static_cast<ssize_t>(kChunk)) {
        next = other.size();
      } else {
        next += kChunk;
      }
      turn.notify_all();
    }
  };
  std::thread even(take_turns, 0), odd(take_turns, 1);
  even.join();
  odd.join();
  ASSERT_EQ(::close(shared), 0);
  for (const auto& [name, expected] : {std::pair<std::string, const std::string*>{"big.bin", &content},
                                       std::pair<std::string, const std::string*>{"turns.bin", &other}}) {
    std::string blob = dir_ + "/" + BlobPath(Sha256Hex(*expected));
    ASSERT_TRUE(PathExists(blob)) << name << ": no blob named by its content's digest";
    EXPECT_TRUE(Slurp(blob) == *expected) << name;
    EXPECT_TRUE(Slurp(F(name)) == *expected) << name;
  }
  ASSERT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

// fallocate in the modes programs use, forwarded to the working copy and committed like any
// write; a folder's nlink counts its subfolders; a file unlinked while open has nlink 0; a
// folder's mtime and ctime move when its entries change, and a file's ctime on chmod.
TEST_F(CapsulefsTest, FallocateLinkCountsAndTimesAsPosixHasThem) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  int fd = ::open(F("alloc.bin").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(fd, 0);
  struct stat st;
  ASSERT_EQ(::fallocate(fd, 0, 0, 8192), 0) << std::strerror(errno);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 8192);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_KEEP_SIZE, 8192, 8192), 0);
  ASSERT_EQ(::fstat(fd, &st), 0);
  EXPECT_EQ(st.st_size, 8192);
  std::string xs(8192, 'x');
  ASSERT_EQ(::pwrite(fd, xs.data(), xs.size(), 0), 8192);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, 4096), 0) << std::strerror(errno);
  ASSERT_EQ(::fallocate(fd, FALLOC_FL_ZERO_RANGE, 6144, 1024), 0) << std::strerror(errno);
  ASSERT_EQ(::close(fd), 0);
  std::string expected = std::string(4096, '\0') + std::string(2048, 'x') + std::string(1024, '\0') +
                         std::string(1024, 'x');
  EXPECT_EQ(Slurp(F("alloc.bin")), expected);

  ASSERT_EQ(::mkdir(F("d").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(F("d/a").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(F("d/b").c_str(), 0755), 0);
  ASSERT_EQ(Put(F("d/file"), "x"), 0);
  ASSERT_EQ(::stat(F("d").c_str(), &st), 0);
  EXPECT_EQ(st.st_nlink, 4u) << "2 + its two subfolders";

  int open_then_unlinked = ::open(F("d/file").c_str(), O_RDONLY);
  ASSERT_GE(open_then_unlinked, 0);
  struct timespec past[2] = {{1000000000, 0}, {1000000000, 0}};
  ASSERT_EQ(::utimensat(AT_FDCWD, F("d").c_str(), past, 0), 0);
  ASSERT_EQ(::unlink(F("d/file").c_str()), 0);
  ASSERT_EQ(::fstat(open_then_unlinked, &st), 0);
  EXPECT_EQ(st.st_nlink, 0u);
  ::close(open_then_unlinked);
  ASSERT_EQ(::stat(F("d").c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1000000000) << "an unlink changes its folder's mtime";
  EXPECT_GT(st.st_ctim.tv_sec, 1000000000);
  ASSERT_EQ(::utimensat(AT_FDCWD, F("d").c_str(), past, 0), 0);
  ASSERT_EQ(Put(F("d/new"), "y"), 0);
  ASSERT_EQ(::stat(F("d").c_str(), &st), 0);
  EXPECT_GT(st.st_mtim.tv_sec, 1000000000) << "a create changes its folder's mtime";

  ASSERT_EQ(::utimensat(AT_FDCWD, F("d/new").c_str(), past, 0), 0);
  ASSERT_EQ(::chmod(F("d/new").c_str(), 0600), 0);
  ASSERT_EQ(::stat(F("d/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1000000000);
  EXPECT_GT(st.st_ctim.tv_sec, 1000000000) << "chmod changes ctime, not mtime";

  // Access and modification times are set apart, the epoch included; reads do not move them.
  struct timespec apart[2] = {{0, 0}, {1500000000, 7}};
  ASSERT_EQ(::utimensat(AT_FDCWD, F("d/new").c_str(), apart, 0), 0);
  EXPECT_EQ(Slurp(F("d/new")), "y");
  ASSERT_EQ(::stat(F("d/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 0);
  EXPECT_EQ(st.st_mtim.tv_sec, 1500000000);
  EXPECT_EQ(st.st_mtim.tv_nsec, 7);
  struct timespec only_atime[2] = {{1600000000, 0}, {0, UTIME_OMIT}};
  ASSERT_EQ(::utimensat(AT_FDCWD, F("d/new").c_str(), only_atime, 0), 0);
  ASSERT_EQ(::stat(F("d/new").c_str(), &st), 0);
  EXPECT_EQ(st.st_atim.tv_sec, 1600000000);
  EXPECT_EQ(st.st_mtim.tv_sec, 1500000000);
}

// Hard links: one file under several names, in one folder or two, with one content, one
// inode and a true link count, through unlink and rename, kept across a remount and in the
// snapshot as a link group that capsule verify checks.
TEST_F(CapsulefsTest, HardLinksShareContentAndSurviveRemount) {
  struct stat a, b, c;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("a"), "one\n"), 0);
    ASSERT_EQ(::mkdir(F("d").c_str(), 0755), 0);
    ASSERT_EQ(::link(F("a").c_str(), F("b").c_str()), 0) << std::strerror(errno);
    ASSERT_EQ(::link(F("a").c_str(), F("d/c").c_str()), 0) << std::strerror(errno);
    EXPECT_EQ(::link(F("a").c_str(), F("b").c_str()), -1);
    EXPECT_EQ(errno, EEXIST);
    EXPECT_EQ(::link(F("d").c_str(), F("d2").c_str()), -1) << "a folder has one name";
    EXPECT_EQ(errno, EPERM);
    ASSERT_EQ(::stat(F("a").c_str(), &a), 0);
    ASSERT_EQ(::stat(F("b").c_str(), &b), 0);
    ASSERT_EQ(::stat(F("d/c").c_str(), &c), 0);
    EXPECT_EQ(a.st_ino, b.st_ino);
    EXPECT_EQ(a.st_ino, c.st_ino);
    EXPECT_EQ(a.st_nlink, 3u);
    // A write through one name is the content of every name, at once.
    int fd = ::open(F("b").c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "two\n", 4), 4);
    EXPECT_EQ(Slurp(F("d/c")), "one\ntwo\n");
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::chmod(F("d/c").c_str(), 0600), 0);
    ASSERT_EQ(::stat(F("a").c_str(), &a), 0);
    EXPECT_EQ(a.st_mode & 07777, 0600u);
    // Unlink and rename move names, not the file.
    ASSERT_EQ(::unlink(F("a").c_str()), 0);
    ASSERT_EQ(::stat(F("b").c_str(), &b), 0);
    EXPECT_EQ(b.st_nlink, 2u);
    ASSERT_EQ(::rename(F("d/c").c_str(), F("e").c_str()), 0);
    EXPECT_EQ(::rename(F("b").c_str(), F("e").c_str()), 0) << "two names of one file: nothing to do";
    ASSERT_EQ(::stat(F("e").c_str(), &c), 0);
    EXPECT_EQ(c.st_ino, b.st_ino);
    EXPECT_EQ(c.st_nlink, 2u);
    // Renaming another file over one name leaves the other.
    ASSERT_EQ(Put(F("f"), "other"), 0);
    ASSERT_EQ(::link(F("f").c_str(), F("g").c_str()), 0);
    ASSERT_EQ(::rename(F("f").c_str(), F("b").c_str()), 0);
    ASSERT_EQ(::stat(F("e").c_str(), &c), 0);
    EXPECT_EQ(c.st_nlink, 1u);
    EXPECT_EQ(Slurp(F("e")), "one\ntwo\n");
    ASSERT_EQ(::stat(F("g").c_str(), &b), 0);
    EXPECT_EQ(b.st_nlink, 2u);
  }
  ExpectVerifies();
  Result<std::string> snapshot = ReadFile(dir_ + "/artifacts/snapshot.json");
  ASSERT_TRUE(snapshot.ok());
  EXPECT_NE(snapshot->find("\"link\""), std::string::npos) << *snapshot;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    struct stat g, e;
    ASSERT_EQ(::stat(F("b").c_str(), &b), 0);
    ASSERT_EQ(::stat(F("g").c_str(), &g), 0);
    ASSERT_EQ(::stat(F("e").c_str(), &e), 0);
    EXPECT_EQ(b.st_ino, g.st_ino) << "still one file after a remount";
    EXPECT_EQ(b.st_nlink, 2u);
    EXPECT_EQ(e.st_nlink, 1u);
    EXPECT_EQ(e.st_mode & 07777, 0600u);
    ASSERT_EQ(Put(F("g"), "rewritten"), 0);
    EXPECT_EQ(Slurp(F("b")), "rewritten");
  }
  ExpectVerifies();
  // A link group whose names disagree is damage verify names.
  std::string text = *ReadFile(dir_ + "/artifacts/snapshot.json");
  size_t mode = text.find("\"mode\":420", text.find("\"g\""));
  ASSERT_NE(mode, std::string::npos) << text;
  text.replace(mode, std::string("\"mode\":420").size(), "\"mode\":384");
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/artifacts/snapshot.json", text).ok());
  auto verify = RunCapsule({"verify", dir_});
  EXPECT_NE(verify.exit_code, 0);
  EXPECT_NE((verify.out + verify.err).find("hard link"), std::string::npos) << verify.out << verify.err;
}

// FIFOs, sockets and device nodes: metadata-only entries the kernel serves; a FIFO carries
// bytes between two processes, a socket can be bound, and all of them survive a remount.
TEST_F(CapsulefsTest, FifosSocketsAndDevicesAreKept) {
  const bool can_make_devices = ::mknod((root_ + "/probe").c_str(), S_IFCHR | 0600, makedev(1, 3)) == 0;
  if (!can_make_devices) std::cerr << "no CAP_MKNOD here: device nodes are not tried\n";
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::mkfifo(F("pipe").c_str(), 0640), 0) << std::strerror(errno);
    // Only where this process may make devices at all (not in a user namespace's sandbox).
    if (can_make_devices) {
      ASSERT_EQ(::mknod(F("null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0) << std::strerror(errno);
    }
    // Bound by a child from inside files/: a test folder's path may be longer than sun_path.
    pid_t binder = ::fork();
    ASSERT_GE(binder, 0);
    if (binder == 0) {
      if (::chdir(F("").c_str()) != 0) ::_exit(1);
      int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
      struct sockaddr_un addr {};
      addr.sun_family = AF_UNIX;
      std::strcpy(addr.sun_path, "sock");
      ::_exit(s >= 0 && ::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 ? 0 : 2);
    }
    int bound = -1;
    ASSERT_EQ(::waitpid(binder, &bound, 0), binder);
    ASSERT_TRUE(WIFEXITED(bound) && WEXITSTATUS(bound) == 0) << "bind of files/sock failed";
    std::thread writer([&] {
      int w = ::open(F("pipe").c_str(), O_WRONLY);
      if (w >= 0) {
        (void)!::write(w, "through", 7);
        ::close(w);
      }
    });
    int r = ::open(F("pipe").c_str(), O_RDONLY);
    ASSERT_GE(r, 0);
    char buffer[16] = {};
    ssize_t n = ::read(r, buffer, sizeof buffer);
    ::close(r);
    writer.join();
    EXPECT_EQ(std::string(buffer, n > 0 ? n : 0), "through");
  }
  ExpectVerifies();
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  struct stat st;
  ASSERT_EQ(::lstat(F("pipe").c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0640u);
  if (can_make_devices) {
    ASSERT_EQ(::lstat(F("null").c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode));
    EXPECT_EQ(st.st_rdev, makedev(1, 3));
  }
  ASSERT_EQ(::lstat(F("sock").c_str(), &st), 0);
  EXPECT_TRUE(S_ISSOCK(st.st_mode));
  ASSERT_EQ(::unlink(F("pipe").c_str()), 0);
  EXPECT_NE(::lstat(F("pipe").c_str(), &st), 0);
}

// Shared mappings work for reading and writing (SQLite's WAL index, many tools): what a
// mapping writes is what read() returns, and it is committed at close like any write.
TEST_F(CapsulefsTest, SharedMappingsReadAndWrite) {
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("m.bin"), std::string(8192, 'a')), 0);
    int fd = ::open(F("m.bin").c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    void* map = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ASSERT_NE(map, MAP_FAILED) << std::strerror(errno);
    char* bytes = static_cast<char*>(map);
    EXPECT_EQ(bytes[4096], 'a');
    std::memcpy(bytes + 4096, "mapped", 6);
    ASSERT_EQ(::msync(map, 8192, MS_SYNC), 0);
    char buffer[7] = {};
    int other = ::open(F("m.bin").c_str(), O_RDONLY);
    ASSERT_GE(other, 0);
    ASSERT_EQ(::pread(other, buffer, 6, 4096), 6);
    EXPECT_STREQ(buffer, "mapped");
    ::close(other);
    ASSERT_EQ(::munmap(map, 8192), 0);
    ASSERT_EQ(::close(fd), 0);
    void* read_only = nullptr;
    int reader = ::open(F("m.bin").c_str(), O_RDONLY);
    ASSERT_GE(reader, 0);
    read_only = ::mmap(nullptr, 8192, PROT_READ, MAP_SHARED, reader, 0);
    ASSERT_NE(read_only, MAP_FAILED) << std::strerror(errno);
    EXPECT_EQ(std::string(static_cast<char*>(read_only) + 4096, 6), "mapped");
    ::munmap(read_only, 8192);
    ::close(reader);
  }
  // Committed: the capsule verifies and holds the mapped bytes after the unmount.
  EXPECT_EQ(RunCapsule({"verify", dir_}).exit_code, 0);
  std::string expected = std::string(4096, 'a') + "mapped" + std::string(8192 - 4096 - 6, 'a');
  EXPECT_NE(Slurp(dir_ + "/artifacts/snapshot.json").find(Sha256Hex(expected)), std::string::npos);
}

TEST_F(CapsulefsTest, TheJournalTakesWholeLinesAppendedAndRefusesTheRest) {
  std::string journal = mnt_ + "/memory/timeline_events.jsonl";
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    // A good line, and a line written in two pieces: each taken when its newline arrives.
    EXPECT_EQ(Put(journal, "{\"type\":\"user_message\",\"data\":{\"text\":\"hello\"}}\n", O_WRONLY | O_APPEND), 0);
    int fd = ::open(journal.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    std::string first = "{\"type\":\"user_message\",", second = "\"data\":{\"text\":\"in two pieces\"}}\n";
    EXPECT_EQ(::write(fd, first.data(), first.size()), static_cast<ssize_t>(first.size())) << errno;
    EXPECT_EQ(Slurp(journal).find("in two pieces"), std::string::npos);  // not yet: no newline
    EXPECT_EQ(::write(fd, second.data(), second.size()), static_cast<ssize_t>(second.size())) << errno;
    EXPECT_EQ(::close(fd), 0);
    std::string after_good = Slurp(journal);
    EXPECT_NE(after_good.find("\"seq\":2"), std::string::npos) << after_good;
    EXPECT_NE(after_good.find("in two pieces"), std::string::npos);
    // Refused with EINVAL, nothing kept: not JSON, no type, bad data, another machine's chain.
    for (const std::string& bad : {std::string("not json\n"), std::string("{\"data\":{}}\n"),
                                   std::string("{\"type\":\"tool_call\",\"data\":{\"call_id\":\"c\",\"name\":\"n\",\"arguments\":1}}\n"),
                                   std::string("{\"type\":\"user_message\",\"machine\":\"m-0000000000000000\",\"data\":{\"text\":\"forged\"}}\n")}) {
      EXPECT_EQ(Put(journal, bad, O_WRONLY | O_APPEND), EINVAL) << bad;
    }
    EXPECT_EQ(Slurp(journal), after_good);
    // Hostile lines are refused and the driver lives on: a number out of range, an integer
    // wider than 64 bits, nesting 100,000 deep.
    for (const std::string& hostile :
         {std::string("{\"type\":\"user_message\",\"data\":{\"text\":\"x\",\"n\":1e999}}\n"),
          std::string("{\"type\":\"user_message\",\"data\":{\"text\":\"x\",\"n\":123456789012345678901234567890}}\n"),
          "{\"type\":\"user_message\",\"data\":{\"text\":\"x\",\"deep\":" + std::string(100000, '[') +
              std::string(100000, ']') + "}}\n"}) {
      EXPECT_EQ(Put(journal, hostile, O_WRONLY | O_APPEND), EINVAL);
    }
    EXPECT_EQ(Slurp(journal), after_good);
    // One write holding a good line and a bad one keeps neither: a writer that retries the
    // good line alone records it once.
    std::string good_line = "{\"type\":\"user_message\",\"data\":{\"text\":\"exactly once\"}}\n";
    EXPECT_EQ(Put(journal, good_line + "BAD\n", O_WRONLY | O_APPEND), EINVAL);
    EXPECT_EQ(Slurp(journal), after_good);
    EXPECT_EQ(Put(journal, good_line, O_WRONLY | O_APPEND), 0);
    std::string after_retry = Slurp(journal);
    EXPECT_EQ(after_retry.find("exactly once"), after_retry.rfind("exactly once"));
    EXPECT_NE(after_retry.find("exactly once"), std::string::npos);
    after_good = after_retry;
    // A write anywhere but the end, and a truncate, are refused with EPERM.
    fd = ::open(journal.c_str(), O_WRONLY);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::pwrite(fd, "{}\n", 3, 0), -1);
    EXPECT_EQ(errno, EPERM);
    ::close(fd);
    EXPECT_EQ(Put(journal, "{\"type\":\"system\",\"data\":{\"text\":\"x\"}}\n", O_WRONLY | O_TRUNC), EPERM);
    EXPECT_EQ(Slurp(journal), after_good);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  auto log = RunCapsule({"log", dir_});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  EXPECT_NE(log.out.find("user_message in two pieces"), std::string::npos) << log.out;
  ExpectVerifies();
}

TEST_F(CapsulefsTest, EnvironmentSpecWithASecretIsRefusedAtClose) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  std::string spec = mnt_ + "/environment/spec.json";
  std::string old = Slurp(spec);
  EXPECT_EQ(Put(spec, R"({"env":{"API_KEY":"sk-123"}})"), EINVAL);
  EXPECT_EQ(Slurp(spec), old);
  int fd = ::open(spec.c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  std::string secret = R"({"env":{"GITHUB_TOKEN":"x"}})";
  // Refused at the write that makes it whole JSON, and again at fsync and close.
  EXPECT_EQ(::write(fd, secret.data(), secret.size()), -1);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(::fsync(fd), -1);
  EXPECT_EQ(errno, EINVAL);
  ::close(fd);
  EXPECT_EQ(Slurp(spec), old);
  std::string good = R"({"env":{"LANG":"C"},"secrets":["API_KEY"]})";
  EXPECT_EQ(Put(spec, good), 0);
  EXPECT_EQ(Slurp(spec), good);
  // A shell's redirection opens, dups and closes the first descriptor before writing: the
  // empty intermediate state is refused, the handle keeps its copy, the final close decides.
  // The write that completes the JSON is refused, so the shell sees it fail (not only close).
  EXPECT_NE(testing::Shell("echo '{\"env\":{\"DB_PASSWORD\":\"p\"}}' > " + spec), 0);
  EXPECT_EQ(Slurp(spec), good);
  EXPECT_NE(testing::Shell("echo '{\"env\":{\"DB\":\"mysql://root:pw@db/x\"}}' > " + spec), 0);
  EXPECT_EQ(Slurp(spec), good);
  std::string other = "{\"env\":{\"LANG\":\"C.UTF-8\"}}\n";
  EXPECT_EQ(testing::Shell("echo '{\"env\":{\"LANG\":\"C.UTF-8\"}}' > " + spec), 0);
  EXPECT_EQ(Slurp(spec), other);
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

TEST_F(CapsulefsTest, FreezeHoldsWritersAndLetsReadersGoThawReleasesRetireRefuses) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("doc.txt"), "before"), 0);
  // A writer with a file open and uncommitted: freeze commits it.
  int open_writer = ::open(F("open.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(open_writer, 0);
  ASSERT_EQ(::write(open_writer, "pending", 7), 7);
  auto frozen = RunCapsule({"freeze", mnt_});
  ASSERT_EQ(frozen.exit_code, 0) << frozen.err;
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("frozen"), std::string::npos);
  auto verify = RunCapsule({"verify", dir_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;  // the capsule is current on disk
  EXPECT_NE(Slurp(dir_ + "/artifacts/snapshot.json").find("open.txt"), std::string::npos);
  ::close(open_writer);

  std::atomic<int> result{-1};
  std::thread writer([&] { result = Put(F("doc.txt"), "after"); });
  EXPECT_TRUE(WaitUntil([&] { return WritesWaiting(mnt_) == 1 || result != -1; }, 60));
  EXPECT_EQ(result.load(), -1) << "the writer should wait while frozen";
  EXPECT_EQ(WritesWaiting(mnt_), 1);
  EXPECT_EQ(Slurp(F("doc.txt")), "before");  // readers go on
  EXPECT_EQ(Slurp(F("open.txt")), "pending");
  auto thawed = RunCapsule({"thaw", mnt_});
  ASSERT_EQ(thawed.exit_code, 0) << thawed.err;
  writer.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(Slurp(F("doc.txt")), "after");

  // Retire turns a waiting writer into EROFS; statfs then reports read-only.
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  result = -1;
  std::thread blocked([&] { result = Put(F("doc.txt"), "lost"); });
  EXPECT_TRUE(WaitUntil([&] { return WritesWaiting(mnt_) == 1 || result != -1; }, 60));
  EXPECT_EQ(result.load(), -1) << "the writer should wait while frozen";
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  Result<Json> retired = fs::SendControl(*socket, "retire");
  ASSERT_TRUE(retired.ok()) << retired.status().message();
  EXPECT_EQ((*retired)["state"], "retired");
  blocked.join();
  EXPECT_EQ(result.load(), EROFS);
  EXPECT_EQ(Put(F("new.txt"), "x"), EROFS);
  EXPECT_EQ(::unlink(F("doc.txt").c_str()), -1);
  EXPECT_EQ(errno, EROFS);
  bool read_only = false;
  for (int i = 0; i < 100 && !read_only; ++i) {
    struct statvfs vfs;
    read_only = ::statvfs(mnt_.c_str(), &vfs) == 0 && (vfs.f_flag & ST_RDONLY);
    if (!read_only) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(read_only);
  EXPECT_EQ(Slurp(F("doc.txt")), "after");
  EXPECT_NE(RunCapsule({"status", mnt_, "--json"}).out.find("\"retired\""), std::string::npos);
}

// The names in the folder `path`, '.' and '..' left out; "!errno" when it cannot be read.
std::set<std::string> NamesIn(const std::string& path) {
  std::set<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return {"!" + std::to_string(errno)};
  while (struct dirent* d = ::readdir(dir)) {
    if (std::string(d->d_name) != "." && std::string(d->d_name) != "..") names.insert(d->d_name);
  }
  ::closedir(dir);
  return names;
}

// The kernel holds a folder's lock while it asks us to change its entries, so a create that
// waited for the thaw held up every listing of the folder. Frozen, a change to a folder's
// entries waits a moment and fails with EBUSY (the listing and lookups go on meanwhile and
// finish before any thaw), and a create that fails, frozen or retired, leaves nothing.
TEST_F(CapsulefsTest, AFrozenFoldersReadersGoOnWhileACreateWaitsAndAFailedCreateLeavesNothing) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("doc.txt"), "before"), 0);
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);

  std::atomic<int> created{-1};
  std::thread creator([&] {
    int fd = ::open(F("new.txt").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    created = fd >= 0 ? 0 : errno;
    if (fd >= 0) ::close(fd);
  });
  // The create is inside its call, waiting (for a second at most, the folder locked by the
  // kernel); the listing and the lookup then end before any thaw.
  EXPECT_TRUE(WaitUntil([&] { return WritesWaiting(mnt_) == 1 || created != -1; }, 60));
  EXPECT_EQ(created.load(), -1) << "the create should wait a moment while frozen";
  std::set<std::string> listed = NamesIn(F(""));
  struct stat st;
  EXPECT_EQ(::stat(F("doc.txt").c_str(), &st), 0) << "a lookup in the folder goes on";
  creator.join();  // before any thaw: the create gave up on its own
  EXPECT_EQ(created.load(), EBUSY);
  EXPECT_EQ(listed.count("doc.txt"), 1u);
  EXPECT_EQ(listed.count("new.txt"), 0u);
  EXPECT_EQ(NamesIn(F("")).count("new.txt"), 0u) << "the failed create left an entry";
  EXPECT_EQ(::mkdir(F("sub").c_str(), 0755), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(::unlink(F("doc.txt").c_str()), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(::rename(F("doc.txt").c_str(), F("moved.txt").c_str()), -1);
  EXPECT_EQ(errno, EBUSY);
  EXPECT_EQ(Slurp(F("doc.txt")), "before");

  // Thawed, the same create goes through and can be removed again.
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  ASSERT_EQ(Put(F("new.txt"), "x"), 0);
  EXPECT_EQ(::unlink(F("new.txt").c_str()), 0);

  // A create that a retirement refuses leaves nothing either.
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  std::thread late([&] {
    int fd = ::open(F("late.txt").c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
    created = fd >= 0 ? 0 : errno;
    if (fd >= 0) ::close(fd);
  });
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  ASSERT_TRUE(fs::SendControl(*socket, "retire").ok());
  late.join();
  EXPECT_TRUE(created.load() == EROFS || created.load() == EBUSY) << created.load();
  EXPECT_EQ(NamesIn(F("")).count("late.txt"), 0u);
  EXPECT_EQ(Slurp(dir_ + "/artifacts/snapshot.json").find("late.txt"), std::string::npos);
}

// A move's source has the mount hash its blobs while the agent runs (preverify); the freeze
// that follows reads only the blobs placed since, and still catches a blob damaged on disk.
TEST_F(CapsulefsTest, FreezeAfterPreverifyReadsOnlyWhatChangedAndStillCatchesDamage) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  for (int i = 0; i < 20; ++i) ASSERT_EQ(Put(F("f" + std::to_string(i)), "body " + std::to_string(i)), 0);
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  Result<Json> first = fs::SendControl(*socket, "preverify");
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_GE((*first)["blobs_read"].get<uint64_t>(), 20u);
  Result<Json> again = fs::SendControl(*socket, "preverify");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ((*again)["blobs_read"], 0) << "nothing changed, nothing read";

  ASSERT_EQ(Put(F("new-1"), "new one"), 0);
  ASSERT_EQ(Put(F("new-2"), "new two"), 0);
  // A file deleted meanwhile: the freeze's checkpoint removes its blob, and its verify judges
  // the blobs folder as it is after that removal.
  ASSERT_EQ(::unlink(F("f5").c_str()), 0);
  const std::string deleted_blob = dir_ + "/" + BlobPath(Sha256Hex("body 5"));
  ASSERT_TRUE(PathExists(deleted_blob));
  // The journal grows meanwhile: the checkpoint and the verify hash only what was appended,
  // and the manifest's digest of it is still the whole file's.
  const std::string journal = mnt_ + "/memory/timeline_events.jsonl";
  const std::string line = R"({"data":{"text":"while preverified"},"type":"user_message"})" "\n";
  auto expect_journal_listed_whole = [&] {
    Result<Manifest> manifest = Manifest::Load(dir_);
    ASSERT_TRUE(manifest.ok());
    std::string text = Slurp(dir_ + "/" + kJournalPath);
    EXPECT_NE(text.find("while preverified"), std::string::npos);
    EXPECT_EQ(manifest->files[kJournalPath], (FileDigest{Sha256Hex(text), text.size()}));
  };
  ASSERT_EQ(Put(journal, line, O_WRONLY | O_APPEND), 0);
  Result<Json> frozen = fs::SendControl(*socket, "freeze");
  ASSERT_TRUE(frozen.ok()) << frozen.status().message();
  EXPECT_EQ((*frozen)["blobs_read"], 2) << "the freeze reads the two new blobs only";
  EXPECT_FALSE(PathExists(deleted_blob));
  expect_journal_listed_whole();
  ExpectVerifies();
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  ASSERT_EQ(Put(journal, line, O_WRONLY | O_APPEND), 0);
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  expect_journal_listed_whole();
  ExpectVerifies();
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);

  // A blob changed under the mount (same inode and size) is read again and refused.
  std::string blob = dir_ + "/" + BlobPath(Sha256Hex("body 3"));
  ASSERT_TRUE(PathExists(blob)) << blob;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  {
    std::fstream out(blob, std::ios::in | std::ios::out | std::ios::binary);
    out << "BODY 3";
  }
  auto refused = RunCapsule({"freeze", mnt_});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE((refused.out + refused.err).find("does not verify"), std::string::npos) << refused.out << refused.err;
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("active"), std::string::npos) << "a failed freeze leaves it running";
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  {
    std::fstream out(blob, std::ios::in | std::ios::out | std::ios::binary);
    out << "body 3";
  }
  EXPECT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  EXPECT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);

  // The freeze after a preverify checks the manifest and snapshot it has just written by
  // their digests, and still finds a blob put beside the mount's, or one taken away.
  ASSERT_TRUE(fs::SendControl(*socket, "preverify").ok());
  const std::string stray = dir_ + "/" + BlobPath(Sha256Hex("stray"));
  ASSERT_TRUE(WriteFileAtomic(stray, "stray").ok());
  auto stray_refused = RunCapsule({"freeze", mnt_});
  EXPECT_NE(stray_refused.exit_code, 0);
  EXPECT_NE(stray_refused.err.find("not in manifest"), std::string::npos) << stray_refused.out << stray_refused.err;
  ASSERT_EQ(::unlink(stray.c_str()), 0);
  ASSERT_TRUE(fs::SendControl(*socket, "preverify").ok());
  const std::string kept = dir_ + "/.capsule/kept-blob";
  ASSERT_EQ(::rename(blob.c_str(), kept.c_str()), 0);
  auto missing_refused = RunCapsule({"freeze", mnt_});
  EXPECT_NE(missing_refused.exit_code, 0);
  EXPECT_NE(missing_refused.err.find("missing"), std::string::npos) << missing_refused.out << missing_refused.err;
  ASSERT_EQ(::rename(kept.c_str(), blob.c_str()), 0);
  ASSERT_TRUE(fs::SendControl(*socket, "preverify").ok());
  EXPECT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  ExpectVerifies();
  EXPECT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
}

// The memory the mount's start and a freeze build for a while (the documents' texts and
// parses, the listings, the digests found) is given back once each is done: the driver's
// resident set then is below its peak, not at it (before, glibc kept it: resident and peak
// were equal, 41 of 41 MiB here).
TEST_F(CapsulefsTest, TheMountsStartAndAFreezeGiveBackTheMemoryTheyBuiltForAWhile) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator keeps freed memory in quarantine";
#endif
  const std::string ws = root_ + "/many";
  for (int i = 0; i < 8000; ++i) {
    const std::string folder = ws + "/d" + std::to_string(i / 500);
    if (i % 500 == 0) {
      ASSERT_TRUE(MakeDirectories(folder).ok());
    }
    std::string body;
    for (int k = 0; k < 100; ++k) body += std::to_string(i) + "\n";
    ASSERT_EQ(Put(folder + "/file-" + std::to_string(i) + ".txt", body), 0);
  }
  const std::string dir = root_ + "/many-cap";
  ASSERT_EQ(RunCapsule({"init", dir, "--id", "many", "--name", "Many", "--workspace", ws}).exit_code, 0);
  Mount mount(dir, mnt_);
  ASSERT_TRUE(mount.up());
  const double mounted = testing::ProcStatusMiB(mount.pid(), "VmRSS");
  const double mounted_peak = testing::ProcStatusMiB(mount.pid(), "VmHWM");
  ASSERT_GT(mounted, 0);
  // Measured: 18.5 of 25 MiB.
  EXPECT_LT(mounted, 0.85 * mounted_peak) << "resident " << mounted << " MiB once mounted, peak " << mounted_peak;
  for (int round = 0; round < 2; ++round) {
    ASSERT_EQ(Put(F("changed-" + std::to_string(round)), "a change"), 0);
    ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
    ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  }
  const double now = testing::ProcStatusMiB(mount.pid(), "VmRSS");
  const double peak = testing::ProcStatusMiB(mount.pid(), "VmHWM");
  // Measured: 27.8 of 33 MiB.
  EXPECT_LT(now, 0.9 * peak) << "resident " << now << " MiB after two freezes, peak " << peak << " MiB, "
                             << mounted << " MiB once mounted";
  EXPECT_EQ(mount.Unmount(), 0);
  auto verify = RunCapsule({"verify", dir});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A small tmpfs of its own, taken away when the test ends.
class SmallDisk {
 public:
  SmallDisk(const std::string& path, const std::string& size) : path_(path) {
    mounted_ = MakeDirectories(path).ok() &&
               ::mount("tmpfs", path.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) ::umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  // Writes `path` until the disk is full.
  void Fill(const std::string& path) {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::string block(4096, 'x');
    while (fd >= 0 && ::write(fd, block.data(), block.size()) > 0) {
    }
    if (fd >= 0) ::close(fd);
  }

 private:
  std::string path_;
  bool mounted_ = false;
};

// A change whose change-log line the disk cannot take is refused, and the view shows it did
// not happen: the name is where it was, the attributes and the folder's times as they were
// (before, the tree kept the change, which the kernel had been told failed, and the unmount's
// checkpoint saved it).
TEST_F(CapsulefsTest, AChangeTheChangeLogCannotTakeIsRefusedAndTakenBack) {
  if (::getuid() != 0) GTEST_SKIP() << "needs root to mount a small tmpfs";
  SmallDisk disk(root_ + "/small", "4m");
  if (!disk.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  // Long names: every change below writes a line longer than the padding's (see below).
  const std::string a = std::string(200, 'a'), b = std::string(200, 'b'), over = std::string(200, 'o');
  const std::string sub = std::string(200, 'd'), empty = sub + "/" + std::string(200, 'e');
  const std::string ws = root_ + "/small-ws";
  ASSERT_TRUE(MakeDirectories(ws + "/" + empty).ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/" + a, "alpha\n").ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/" + sub + "/" + b, "beta\n").ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/" + sub + "/" + over, "over\n").ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/p", "padding\n").ok());
  const std::string dir = root_ + "/small/cap";
  ASSERT_EQ(RunCapsule({"init", dir, "--id", "small", "--name", "Small", "--workspace", ws}).exit_code, 0);
  const std::string b_path = sub + "/" + b, b_link = std::string(200, 'l');
  const std::string renamed = std::string(200, 'c'), moved = std::string(200, 'm');
  const std::string new_dir = sub + "/" + std::string(200, 'n'), a_link = sub + "/" + std::string(200, 'k');
  struct stat before_a, before_b, before_sub;
  {
    Mount mount(dir, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::link(F(b_path).c_str(), F(b_link).c_str()), 0);
    ASSERT_EQ(::stat(F(a).c_str(), &before_a), 0);
    ASSERT_EQ(::stat(F(b_path).c_str(), &before_b), 0);
    ASSERT_EQ(::stat(F(sub).c_str(), &before_sub), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // a time that moved would show
    disk.Fill(root_ + "/small/filler");
    // The change log's last page still has room: short changes fill it until one does not
    // fit (written in part, then cut off), leaving less room than any change below needs.
    int padded = 0;
    while (padded < 1000 && ::chmod(F("p").c_str(), padded % 2 ? 0644 : 0640) == 0) ++padded;
    ASSERT_LT(padded, 1000) << "the disk never filled";
    // Each refused, and each leaves the view as it was.
    EXPECT_NE(::rename(F(a).c_str(), F(renamed).c_str()), 0);
    EXPECT_NE(::rename(F(a).c_str(), F(sub + "/" + over).c_str()), 0);  // over another file
    EXPECT_NE(::rename(F(sub).c_str(), F(moved).c_str()), 0);           // a folder
    EXPECT_NE(::unlink(F(b_path).c_str()), 0);                           // a name of two
    EXPECT_NE(::unlink(F(a).c_str()), 0);
    EXPECT_NE(::rmdir(F(empty).c_str()), 0);
    EXPECT_NE(::chmod(F(a).c_str(), 0600), 0);
    EXPECT_NE(::chown(F(a).c_str(), 1234, 1234), 0);
    const struct timespec times[2] = {{1000, 0}, {1000, 0}};
    EXPECT_NE(::utimensat(AT_FDCWD, F(a).c_str(), times, 0), 0);
    EXPECT_NE(::mkdir(F(new_dir).c_str(), 0755), 0);
    EXPECT_NE(::link(F(a).c_str(), F(a_link).c_str()), 0);
    EXPECT_LT(::open(F(sub + "/" + std::string(200, 'f')).c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644), 0);
    ASSERT_EQ(::unlink((root_ + "/small/filler").c_str()), 0);
    // The driver's own view, past the kernel's caches: a remount reads what it saved.
    EXPECT_EQ(mount.Unmount(), 0);
  }
  Mount mount(dir, mnt_);
  ASSERT_TRUE(mount.up());
  EXPECT_EQ(Slurp(F(a)), "alpha\n");
  EXPECT_EQ(Slurp(F(b_path)), "beta\n");
  EXPECT_EQ(Slurp(F(sub + "/" + over)), "over\n");
  EXPECT_EQ(Slurp(F(b_link)), "beta\n");
  EXPECT_FALSE(PathExists(F(renamed)));
  EXPECT_FALSE(PathExists(F(moved)));
  EXPECT_FALSE(PathExists(F(new_dir)));
  EXPECT_FALSE(PathExists(F(a_link)));
  EXPECT_FALSE(PathExists(F(sub + "/" + std::string(200, 'f'))));
  struct stat now_a, now_b, now_empty, now_sub;
  ASSERT_EQ(::stat(F(sub).c_str(), &now_sub), 0);
  EXPECT_EQ(now_sub.st_mtim.tv_sec, before_sub.st_mtim.tv_sec) << "the folder's time moved with a refused change";
  EXPECT_EQ(now_sub.st_mtim.tv_nsec, before_sub.st_mtim.tv_nsec);
  EXPECT_TRUE(::stat(F(empty).c_str(), &now_empty) == 0 && S_ISDIR(now_empty.st_mode));
  ASSERT_EQ(::stat(F(a).c_str(), &now_a), 0);
  ASSERT_EQ(::stat(F(b_path).c_str(), &now_b), 0);
  EXPECT_EQ(now_a.st_mode, before_a.st_mode);
  EXPECT_EQ(now_a.st_uid, before_a.st_uid);
  EXPECT_EQ(now_a.st_mtim.tv_sec, before_a.st_mtim.tv_sec);
  EXPECT_EQ(now_b.st_nlink, 2u);
  // With room again, the same changes are taken.
  EXPECT_EQ(::rename(F(a).c_str(), F(renamed).c_str()), 0);
  EXPECT_EQ(::unlink(F(b_path).c_str()), 0);
  EXPECT_EQ(mount.Unmount(), 0);
  auto verify = RunCapsule({"verify", dir});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A write past the driver's file size limit (ulimit -f) is refused with EFBIG and the mount
// serves on. Before, the signal the kernel sends for such a write (SIGXFSZ) ended the driver,
// and every later call on the mount failed with ENOTCONN.
TEST_F(CapsulefsTest, AWritePastTheDriversFileSizeLimitIsRefusedAndTheMountServesOn) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("small.txt"), "small\n"), 0);
  struct rlimit limit {};
  ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, nullptr, &limit), 0);
  const struct rlimit small {1 << 20, limit.rlim_max};
  ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, &small, nullptr), 0);
  int err = 0;
  {
    UniqueFd fd(::open(F("big.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644));
    ASSERT_TRUE(fd.valid()) << std::strerror(errno);
    const std::string block(64 << 10, 'b');
    for (int i = 0; i < 32 && err == 0; ++i) {
      if (::write(fd.get(), block.data(), block.size()) < 0) err = errno;
    }
    if (err == 0 && ::fsync(fd.get()) != 0) err = errno;
  }
  EXPECT_EQ(err, EFBIG) << std::strerror(err);
  // The driver is alive and the mount serves: reads, writes within the limit, a listing.
  EXPECT_EQ(::kill(mount.pid(), 0), 0) << "the driver ended";
  EXPECT_EQ(Slurp(F("small.txt")), "small\n");
  EXPECT_EQ(Put(F("after.txt"), "after\n"), 0);
  EXPECT_EQ(Slurp(F("after.txt")), "after\n");
  ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
  EXPECT_EQ(mount.Unmount(), 0);
  auto verify = RunCapsule({"verify", dir_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A create whose open fails takes its new entry back; when the disk cannot take that
// removal's change-log line either, the entry stays, as the log has it. Either way a crash
// brings back what the view showed: never a file the kernel was told was not made that then
// appears (before, the entry left the view while its creation stayed in the log).
TEST_F(CapsulefsTest, ACreateThatFailsLeavesTheViewAsACrashBringsItBack) {
  const std::string log = dir_ + "/" + local::kWorkspaceLog, work = dir_ + "/" + local::kWorkDir;
  auto size_of = [](const std::string& path) -> off_t {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? st.st_size : -1;
  };
  // The driver's working copies cannot be made (the folder it holds open for them is removed,
  // a file in its place): every open that writes a new file fails after its entry was logged.
  auto break_work = [&] {
    ASSERT_EQ(::rmdir(work.c_str()), 0);
    ASSERT_TRUE(WriteFileAtomic(work, "").ok());
  };
  auto mend_work = [&] {  // for the next mount, which makes the folder again
    ASSERT_EQ(::unlink(work.c_str()), 0);
    ASSERT_EQ(::mkdir(work.c_str(), 0700), 0);
  };
  const std::string taken_back = std::string(100, 't'), kept = std::string(100, 'k');
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    // How long a create's line and a removal's are, for names of this length.
    const off_t start = size_of(log);
    ASSERT_EQ(Put(F(std::string(100, 'p')), ""), 0);
    const off_t created = size_of(log);
    ASSERT_EQ(::unlink(F(std::string(100, 'p')).c_str()), 0);
    const off_t removed = size_of(log);
    ASSERT_GT(created, start);
    ASSERT_GT(removed, created);
    break_work();
    EXPECT_LT(::open(F(taken_back).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 0);
    EXPECT_FALSE(PathExists(F(taken_back))) << "the entry of a failed create is taken back";
    // Room in the log for one more create's line, not for its removal's as well (a line's
    // times may be a few digits longer or shorter: half a removal's line to spare).
    struct rlimit limit {};
    ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, nullptr, &limit), 0);
    const off_t now = size_of(log);
    const struct rlimit tight {static_cast<rlim_t>(now + (created - start) + (removed - created) / 2), limit.rlim_max};
    ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, &tight, nullptr), 0);
    EXPECT_LT(::open(F(kept).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644), 0);
    // The kernel, told the create failed, is told soon after to forget the name's absence.
    bool there = false;
    for (int i = 0; i < 100 && !there; ++i) {
      there = PathExists(F(kept));
      if (!there) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(there) << "the removal could not be logged: the entry stays, as the log has it";
    ASSERT_EQ(::prlimit(mount.pid(), RLIMIT_FSIZE, &limit, nullptr), 0);
    mend_work();
    mount.Kill();
  }
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  EXPECT_FALSE(PathExists(F(taken_back)));
  EXPECT_TRUE(PathExists(F(kept)));
  EXPECT_EQ(mount.Unmount(), 0);
  ExpectVerifies();
}

TEST_F(CapsulefsTest, OnlyTheMountsOwnerMayUseTheControlChannel) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  struct stat st;
  ASSERT_EQ(::stat(socket->c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_TRUE(fs::SendControl(*socket, "status").ok());
  // Another user refused by the peer check, through a socket that user can connect to:
  // confinement_test, TheControlChannelRefusesAnotherUserByItsCredentials.
}

TEST_F(CapsulefsTest, AHolderRecordThatMovesOnRetiresTheMount) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("a.txt"), "one"), 0);
  Result<HolderRecord> record = HolderRecord::Load(dir_);
  ASSERT_TRUE(record.ok());
  record->state = HolderState::kRetired;
  ASSERT_TRUE(record->Save(dir_).ok());
  int err = 0;
  for (int i = 0; i < 100 && err != EROFS; ++i) {
    err = Put(F("a.txt"), "two");
    if (err != EROFS) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(err, EROFS);
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("retired"), std::string::npos);
}

// The race a mover's retire leaves open: it records "retired" first and tells the mount
// second. A thaw that reaches the mount in between (the move's own rollback, or an admin)
// must not revive the capsule: the thaw is refused, the mount retires, the record stays
// retired, and no write is taken.
TEST_F(CapsulefsTest, AThawBetweenTheRecordsRetireAndTheMountsIsRefusedAndRetiresTheMount) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  ASSERT_TRUE(fs::SendControl(*socket, "freeze 0123456789abcdef0123456789abcdef").ok());
  // The mover's decision, exactly as LocalCapsule::Retire writes it; its "retire" to the mount
  // has not been sent yet. The mount checks the record every half second: the thaw below
  // comes well within that.
  Result<HolderRecord> decided =
      TransitionHolder(dir_, {{HolderState::kActive, HolderState::kFrozen}, HolderState::kRetired, ""});
  ASSERT_TRUE(decided.ok()) << decided.status().message();
  Result<Json> thawed = fs::SendControl(*socket, "thaw 0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(thawed.ok());
  EXPECT_NE(thawed.status().message().find("retired"), std::string::npos) << thawed.status().message();
  auto thawed_by_admin = RunCapsule({"thaw", mnt_});
  EXPECT_EQ(thawed_by_admin.exit_code, 1);
  EXPECT_EQ(Put(F("after.txt"), "never"), EROFS);
  EXPECT_NE(RunCapsule({"status", mnt_, "--json"}).out.find("\"retired\""), std::string::npos);
  Result<HolderRecord> record = HolderRecord::Load(dir_);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, HolderState::kRetired);
}

// An admin froze the mount before a move: the move takes that freeze over, and its rollback
// gives it back, so the mount stays frozen until the admin thaws it.
TEST_F(CapsulefsTest, AMovesRollbackGivesAnAdminsFreezeBack) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  const std::string move = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(fs::SendControl(*socket, "freeze " + move).ok());
  ASSERT_TRUE(fs::SendControl(*socket, "thaw " + move).ok());
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("frozen"), std::string::npos);
  std::atomic<int> result{-1};
  // A change of content (a folder's entries would give up after a moment) waits for the thaw.
  std::thread writer([&] { result = Put(F("README.md"), "x"); });
  EXPECT_TRUE(WaitUntil([&] { return WritesWaiting(mnt_) == 1 || result != -1; }, 60));
  EXPECT_EQ(result.load(), -1) << "the admin's freeze still holds writers";
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  writer.join();
  EXPECT_EQ(result.load(), 0);
}

// A mount frozen for a move is thawed only by that move (its rollback); an admin's thaw, or
// another move's, is refused and names the move, which `capsule move --recover` resolves.
TEST_F(CapsulefsTest, AMountFrozenForAMoveIsThawedOnlyByThatMove) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  const std::string move = "00112233445566778899aabbccddeeff";
  ASSERT_TRUE(fs::SendControl(*socket, "freeze " + move).ok());
  EXPECT_EQ(HolderRecord::Load(dir_)->move, move);
  auto admin = RunCapsule({"thaw", mnt_});
  EXPECT_EQ(admin.exit_code, 1);
  EXPECT_NE(admin.err.find(move), std::string::npos) << admin.err;
  EXPECT_NE(admin.err.find("--recover"), std::string::npos) << admin.err;
  EXPECT_FALSE(fs::SendControl(*socket, "thaw ffffffffffffffffffffffffffffffff").ok());
  EXPECT_FALSE(fs::SendControl(*socket, "freeze ffffffffffffffffffffffffffffffff").ok());
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("frozen"), std::string::npos);
  ASSERT_TRUE(fs::SendControl(*socket, "thaw " + move).ok());
  EXPECT_EQ(Put(F("after.txt"), "yes"), 0);
  Result<HolderRecord> record = HolderRecord::Load(dir_);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->state, HolderState::kActive);
  EXPECT_EQ(record->move, "");
}

// A client that connects to the control socket and says nothing is dropped after the
// deadline: status is answered meanwhile and the unmount is not held up.
TEST_F(CapsulefsTest, AStalledControlClientDelaysNeitherStatusNorUnmount) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> socket = fs::FindControlSocket(mnt_);
  ASSERT_TRUE(socket.ok()) << socket.status().message();
  std::vector<UniqueFd> stalled;
  for (int i = 0; i < 3; ++i) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    UniqueFd dir_fd;
    Result<std::string> name = fs::SocketName(*socket, &dir_fd);
    ASSERT_TRUE(name.ok());
    std::memcpy(addr.sun_path, name->c_str(), name->size() + 1);
    ASSERT_EQ(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    if (i == 2) {
      ASSERT_EQ(::write(fd.get(), "stat", 4), 4);  // half a command, never ended
    }
    stalled.push_back(std::move(fd));
  }
  auto started = std::chrono::steady_clock::now();
  auto status = RunCapsule({"status", mnt_});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_NE(status.out.find("active"), std::string::npos);
  double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  // Three stalled clients ahead of it, each dropped at the 2-second deadline.
  EXPECT_LT(waited, 30.0);
  // Each stalled client was dropped: its end reads the end of the stream, no reply.
  char c;
  EXPECT_EQ(::read(stalled[0].get(), &c, 1), 0);
  EXPECT_EQ(mount.Unmount(), 0);
}

// A capsule whose record says frozen (a move left it waiting, its driver died) mounts frozen:
// reads go on, writes wait for the thaw, which then lets them through.
TEST_F(CapsulefsTest, ACapsuleFrozenOnDiskMountsFrozenAndThawsLater) {
  ASSERT_TRUE(TransitionHolder(dir_, {{HolderState::kActive}, HolderState::kFrozen, ""}).ok());
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("frozen"), std::string::npos);
  EXPECT_EQ(Slurp(F("README.md")), "# sample\n");
  std::atomic<int> result{-1};
  // A change of content (a folder's entries would give up after a moment) waits for the thaw.
  std::thread writer([&] { result = Put(F("README.md"), "after the thaw"); });
  EXPECT_TRUE(WaitUntil([&] { return WritesWaiting(mnt_) == 1 || result != -1; }, 60));
  EXPECT_EQ(result.load(), -1) << "the writer should wait while frozen";
  auto thawed = RunCapsule({"thaw", mnt_});
  EXPECT_EQ(thawed.exit_code, 0) << thawed.err;
  writer.join();
  EXPECT_EQ(result.load(), 0);
  EXPECT_EQ(Slurp(F("README.md")), "after the thaw");
}

TEST_F(CapsulefsTest, ACapsuleNotHeldHereMountsReadOnly) {
  ASSERT_EQ(::unlink((dir_ + "/.capsule/holder.json").c_str()), 0);
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  EXPECT_EQ(Slurp(F("README.md")), "# sample\n");
  EXPECT_EQ(Put(F("README.md"), "changed"), EROFS);
  struct statvfs vfs;
  ASSERT_EQ(::statvfs(mnt_.c_str(), &vfs), 0);
  EXPECT_NE(vfs.f_flag & ST_RDONLY, 0u);
}

// Each file holds "<name> v<k>\n" repeated: a mix of two versions, or a torn one, shows.
int VersionOf(const std::string& name, const std::string& content) {
  if (content.empty()) return 0;
  size_t line_end = content.find('\n');
  if (line_end == std::string::npos) return -1;
  std::string line = content.substr(0, line_end + 1);
  if (content.size() % line.size() != 0) return -1;
  for (size_t off = 0; off < content.size(); off += line.size()) {
    if (content.compare(off, line.size(), line) != 0) return -1;
  }
  std::string prefix = name + " v";
  if (line.rfind(prefix, 0) != 0) return -1;
  return std::atoi(line.c_str() + prefix.size());
}

// Writes `data` as the whole content of `path` through a shared mapping: open without
// truncating, size the file, copy into the mapping, unmap, close. 0 or the errno that failed.
// Done in a child process: a mapping of a mount whose driver was killed faults with SIGBUS,
// as it would on any file system that went away, and that must end only the child.
int PutMapped(const std::string& path, const std::string& data) {
  pid_t child = ::fork();
  if (child < 0) return errno;
  if (child == 0) {
    ::signal(SIGBUS, SIG_DFL);  // the fault ends the child plainly (no sanitizer report)
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0) ::_exit(errno);
    int err = 0;
    if (::ftruncate(fd, static_cast<off_t>(data.size())) != 0) err = errno;
    if (err == 0 && !data.empty()) {
      void* map = ::mmap(nullptr, data.size(), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (map == MAP_FAILED) {
        err = errno;
      } else {
        std::memcpy(map, data.data(), data.size());
        if (::munmap(map, data.size()) != 0) err = errno;
      }
    }
    if (::close(fd) != 0 && err == 0) err = errno;
    ::_exit(err);
  }
  int status = 0;
  while (::waitpid(child, &status, 0) < 0) {
    if (errno != EINTR) return errno;
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return EIO;  // killed by SIGBUS: the mount went away under the mapping
}

// Writes `data` over the start of `path` and truncates the rest away (an editor's save in
// place). 0 or the errno that failed.
int PutInPlace(const std::string& path, const std::string& data) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) return errno;
  int err = 0;
  if (::pwrite(fd, data.data(), data.size(), 0) != static_cast<ssize_t>(data.size())) err = errno ? errno : EIO;
  if (err == 0 && ::ftruncate(fd, static_cast<off_t>(data.size())) != 0) err = errno;
  if (::close(fd) != 0 && err == 0) err = errno;
  return err;
}

// kill -9 of the driver at random moments while files are rewritten every way programs do
// (truncate and write, a temporary renamed over, a shared mapping, a write in place then a
// truncate), through either name of a hard-linked file, while a folder is renamed back and
// forth: after each crash every file is a version whose close returned or a later attempt,
// whole; the two names of the hard-linked file are still one file; the folder moved whole.
TEST_F(CapsulefsTest, KillNineLeavesEveryFileOldOrNewAndTheCapsuleRecovers) {
  constexpr int kFiles = 8;        // f0..f7, and the hard-linked pair hl / hl.alias as file kFiles
  constexpr int kLinked = kFiles;
  std::vector<int> acknowledged(kFiles + 1, 0);  // the last version whose close returned 0
  std::vector<int> attempted(kFiles + 1, 0);
  std::mt19937 rng(42);
  {  // a folder that the workload renames back and forth: it moves whole or not at all
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::mkdir(F("dirA").c_str(), 0755), 0);
    for (int g = 0; g < 4; ++g) ASSERT_EQ(Put(F("dirA/g" + std::to_string(g)), "g" + std::to_string(g) + "\n"), 0);
    ASSERT_EQ(Put(F("hl"), ""), 0);
    ASSERT_EQ(::link(F("hl").c_str(), F("hl.alias").c_str()), 0) << std::strerror(errno);
  }
  auto check_folder = [&] {
    bool a = PathExists(F("dirA")), b = PathExists(F("dirB"));
    ASSERT_NE(a, b) << "exactly one of dirA and dirB";
    for (int g = 0; g < 4; ++g) {
      EXPECT_EQ(Slurp(F(std::string(a ? "dirA" : "dirB") + "/g" + std::to_string(g))), "g" + std::to_string(g) + "\n");
    }
  };
  auto check_files = [&](const std::string& when) {
    for (int i = 0; i <= kFiles; ++i) {
      std::string name = i == kLinked ? "hl" : "f" + std::to_string(i);
      int version = PathExists(F(name)) ? VersionOf(name, Slurp(F(name))) : 0;
      ASSERT_GE(version, acknowledged[i]) << name << " lost an acknowledged write (" << when << ")";
      ASSERT_LE(version, attempted[i]) << name << " (" << when << ")";
    }
    struct stat one, other;
    ASSERT_EQ(::stat(F("hl").c_str(), &one), 0);
    ASSERT_EQ(::stat(F("hl.alias").c_str(), &other), 0);
    EXPECT_EQ(one.st_ino, other.st_ino) << "the hard link came apart (" << when << ")";
    EXPECT_EQ(one.st_nlink, 2u);
    EXPECT_EQ(Slurp(F("hl")), Slurp(F("hl.alias")));
  };
  for (int iteration = 0; iteration < 12; ++iteration) {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up()) << "iteration " << iteration;
    check_folder();
    check_files("iteration " + std::to_string(iteration));
    std::atomic<bool> stop{false};
    std::thread workload([&, seed = rng()] {
      std::mt19937 local(seed);
      while (!stop) {
        int i = static_cast<int>(local() % (kFiles + 1));
        std::string name = i == kLinked ? "hl" : "f" + std::to_string(i);
        int version = attempted[i] + 1;
        attempted[i] = version;
        std::string line = name + " v" + std::to_string(version) + "\n";
        std::string data;
        for (size_t n = 1 + local() % 3000; n > 0; --n) data += line;
        if (local() % 4 == 0) {
          bool a = PathExists(F("dirA"));
          if (::rename(F(a ? "dirA" : "dirB").c_str(), F(a ? "dirB" : "dirA").c_str()) != 0) break;
        }
        // The linked file is rewritten in place (a rename over one name would part the two).
        std::string path = F(i == kLinked && local() % 2 == 0 ? "hl.alias" : name);
        int err;
        switch (local() % 4) {
          case 0:
            err = Put(path, data);
            break;
          case 1:
            err = PutMapped(path, data);
            break;
          case 2:
            err = PutInPlace(path, data);
            break;
          default:
            if (i == kLinked) {
              err = Put(path, data);
            } else {  // write a temporary, then rename it over
              std::string tmp = F(name + ".tmp");
              err = Put(tmp, data);
              if (err == 0 && ::rename(tmp.c_str(), path.c_str()) != 0) err = errno;
            }
            break;
        }
        if (err == 0) acknowledged[i] = version;
        if (err != 0) break;
      }
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(30 + rng() % 150));
    mount.Kill();
    stop = true;
    workload.join();
  }
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    check_files("after the last crash");
    check_folder();
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ExpectVerifies();
}

// A power cut after close but before any sync may lose a blob's content while the log line
// naming it survives; the next mount must then keep the file's old content, whole.
TEST_F(CapsulefsTest, ALogLineWhoseBlobDidNotReachTheDiskIsNotReplayed) {
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("f.txt"), "version one\n"), 0);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("f.txt"), "version two\n"), 0);
    ASSERT_EQ(Put(F("g.txt"), "other\n"), 0);
    mount.Kill();
  }
  // Simulate the lost data: the new blob is there but empty.
  std::string blob = dir_ + "/artifacts/blobs/" + Sha256Hex("version two\n");
  ASSERT_TRUE(PathExists(blob));
  ASSERT_EQ(::truncate(blob.c_str(), 0), 0);
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    EXPECT_EQ(Slurp(F("f.txt")), "version one\n");
    EXPECT_EQ(Slurp(F("g.txt")), "other\n");
    EXPECT_EQ(mount.Unmount(), 0);
  }
  EXPECT_FALSE(PathExists(blob));
  ExpectVerifies();
}

// A power cut, simulated: after kill -9 of the driver, everything written since the last sync
// point is damaged at random, as a machine that lost power may leave it: the change log is
// cut or zeroed anywhere past the length it had at the last fsync, and each blob placed since
// the last checkpoint (but the ones fsync made durable) is kept, truncated or removed. What
// fsync acknowledged must survive; every file must come back whole, at some version it was
// written with; the capsule must verify.
TEST_F(CapsulefsTest, APowerCutLosesOnlyWhatWasNotSyncedAndEveryFileIsOldOrNew) {
  constexpr int kFiles = 6;
  std::vector<int> durable(kFiles, 0);    // the version an fsync (or a checkpoint) made durable
  std::vector<int> attempted(kFiles, 0);  // the newest version written
  std::mt19937 rng(7);
  const std::string log_path = dir_ + "/.capsule/workspace.log";
  const std::string blobs = dir_ + "/artifacts/blobs/";
  for (int iteration = 0; iteration < 10; ++iteration) {
    std::set<std::string> synced_blobs;  // blobs that no simulated power cut may touch
    off_t synced_log = 0;
    {
      Mount mount(dir_, mnt_);
      ASSERT_TRUE(mount.up()) << "iteration " << iteration;
      for (int i = 0; i < kFiles; ++i) {
        std::string name = "p" + std::to_string(i);
        int version = PathExists(F(name)) ? VersionOf(name, Slurp(F(name))) : 0;
        ASSERT_GE(version, durable[i]) << name << " lost a synced write (iteration " << iteration << ")";
        ASSERT_LE(version, attempted[i]) << name << " (iteration " << iteration << ")";
        durable[i] = version;  // recovery checkpointed: what is there now is on disk
      }
      // Every blob the checkpointed manifest lists is on disk.
      Result<std::string> manifest = ReadFile(dir_ + "/manifest.json");
      ASSERT_TRUE(manifest.ok());
      Json listed = Json::parse(*manifest)["files"];
      for (const auto& [path, digest] : listed.items()) {
        if (path.rfind("artifacts/blobs/", 0) == 0) synced_blobs.insert(path.substr(16));
      }
      for (int step = 0; step < 40; ++step) {
        int i = static_cast<int>(rng() % kFiles);
        std::string name = "p" + std::to_string(i);
        int version = ++attempted[i];
        std::string line = name + " v" + std::to_string(version) + "\n";
        std::string data;
        for (size_t n = 1 + rng() % 2000; n > 0; --n) data += line;
        bool sync = rng() % 4 == 0;
        int fd = ::open(F(name).c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        ASSERT_GE(fd, 0) << name;
        ASSERT_EQ(::write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
        if (sync) {
          ASSERT_EQ(::fsync(fd), 0) << name;
          durable[i] = version;
          synced_blobs.insert(Sha256Hex(data));
          struct stat st;
          ASSERT_EQ(::stat(log_path.c_str(), &st), 0);
          synced_log = st.st_size;
        }
        ASSERT_EQ(::close(fd), 0) << name;
      }
      mount.Kill();
    }
    // The power cut: damage what no sync covered.
    Result<std::string> log = ReadFile(log_path);
    ASSERT_TRUE(log.ok());
    ASSERT_GE(static_cast<off_t>(log->size()), synced_log);
    if (static_cast<off_t>(log->size()) > synced_log) {
      off_t cut = synced_log + static_cast<off_t>(rng() % (log->size() - synced_log + 1));
      if (rng() % 2 == 0) {
        ASSERT_EQ(::truncate(log_path.c_str(), cut), 0);
      } else {  // a hole of zeros where a later block reached the disk before an earlier one
        UniqueFd fd(::open(log_path.c_str(), O_WRONLY));
        std::string zeros(std::min<size_t>(log->size() - cut, 1 + rng() % 300), '\0');
        ASSERT_EQ(::pwrite(fd.get(), zeros.data(), zeros.size(), cut), static_cast<ssize_t>(zeros.size()));
      }
    }
    DIR* folder = ::opendir(blobs.c_str());
    ASSERT_NE(folder, nullptr);
    std::vector<std::string> names;
    while (struct dirent* entry = ::readdir(folder)) {
      std::string blob = entry->d_name;
      if (blob.size() == 64 && synced_blobs.count(blob) == 0) names.push_back(blob);
    }
    ::closedir(folder);
    for (const std::string& blob : names) {
      switch (rng() % 3) {
        case 0: break;  // reached the disk
        case 1: ASSERT_EQ(::truncate((blobs + blob).c_str(), static_cast<off_t>(rng() % 64)), 0); break;
        case 2: ASSERT_EQ(::unlink((blobs + blob).c_str()), 0); break;
      }
    }
  }
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    for (int i = 0; i < kFiles; ++i) {
      std::string name = "p" + std::to_string(i);
      int version = PathExists(F(name)) ? VersionOf(name, Slurp(F(name))) : 0;
      EXPECT_GE(version, durable[i]) << name;
      EXPECT_LE(version, attempted[i]) << name;
    }
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ExpectVerifies();
}

// Modification times are the ones the writer gave (utimens, or futimens before close as cp -p
// and tar -x do), and stay through an unmount and through kill -9 of the driver.
TEST_F(CapsulefsTest, ModificationTimesSurviveRemountAndCrash) {
  auto mtime_of = [](const std::string& path) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) return std::pair<int64_t, int64_t>(-1, errno);
    return std::pair<int64_t, int64_t>(st.st_mtim.tv_sec, st.st_mtim.tv_nsec);
  };
  const struct timespec t1 = {1000000000, 123}, t2 = {1100000000, 456789}, t3 = {1200000000, 0},
                        t4 = {1300000000, 999999999};
  auto pair = [](struct timespec t) { return std::pair<int64_t, int64_t>(t.tv_sec, t.tv_nsec); };
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("a.txt"), "a\n"), 0);
    struct timespec times[2] = {t1, t1};
    ASSERT_EQ(::utimensat(AT_FDCWD, F("a.txt").c_str(), times, 0), 0);
    int fd = ::open(F("b.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "b\n", 2), 2);
    times[0] = times[1] = t2;
    ASSERT_EQ(::futimens(fd, times), 0);
    ASSERT_EQ(::close(fd), 0);
    ASSERT_EQ(::mkdir(F("d").c_str(), 0755), 0);
    times[0] = times[1] = t3;
    ASSERT_EQ(::utimensat(AT_FDCWD, F("d").c_str(), times, 0), 0);
    EXPECT_EQ(mtime_of(F("a.txt")), pair(t1));
    EXPECT_EQ(mtime_of(F("b.txt")), pair(t2)) << "close must not overwrite the time futimens set";
    EXPECT_EQ(mtime_of(F("d")), pair(t3));
    EXPECT_EQ(mount.Unmount(), 0);
  }
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    EXPECT_EQ(mtime_of(F("a.txt")), pair(t1));
    EXPECT_EQ(mtime_of(F("b.txt")), pair(t2));
    EXPECT_EQ(mtime_of(F("d")), pair(t3));
    struct timespec times[2] = {t4, t4};
    ASSERT_EQ(::utimensat(AT_FDCWD, F("a.txt").c_str(), times, 0), 0);
    ASSERT_EQ(::rename(F("b.txt").c_str(), F("d/b.txt").c_str()), 0);
    mount.Kill();
  }
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    EXPECT_EQ(mtime_of(F("a.txt")), pair(t4)) << "a time set just before a crash is replayed from the log";
    EXPECT_EQ(mtime_of(F("d/b.txt")), pair(t2)) << "a renamed file keeps its time";
    EXPECT_EQ(mtime_of(F("b.txt")).first, -1);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  ExpectVerifies();
}

// Daemonised, the driver writes its last checkpoint after fusermount3 -u has returned; a
// verify straight after waits for it (.capsule/mount.lock) instead of reading a folder in
// the middle of it. A second driver on a mounted folder is refused.
TEST_F(CapsulefsTest, VerifyRightAfterADaemonsUnmountWaitsForItsLastCheckpoint) {
  for (int round = 0; round < 3; ++round) {
    auto started = RunProgram("./capsulefs", {dir_, mnt_});
    ASSERT_EQ(started.exit_code, 0) << started.err;
    ASSERT_TRUE(IsMounted(mnt_));
    ASSERT_TRUE(MakeDirectories(root_ + "/mnt2").ok());
    auto second = RunProgram("./capsulefs", {dir_, root_ + "/mnt2", "-f"});
    EXPECT_EQ(second.exit_code, 1);
    EXPECT_NE(second.err.find("is mounted by another capsulefs"), std::string::npos) << second.err;
    for (int i = 0; i < 300; ++i) {
      ASSERT_EQ(Put(F("r" + std::to_string(round) + "-" + std::to_string(i)), std::to_string(i) + "\n"), 0);
    }
    ASSERT_EQ(RunProgram("fusermount3", {"-u", mnt_}).exit_code, 0);
    auto verify = RunCapsule({"verify", dir_});
    EXPECT_EQ(verify.exit_code, 0) << "round " << round << ": " << verify.out << verify.err;
    EXPECT_NE(Slurp(dir_ + "/artifacts/snapshot.json").find("r" + std::to_string(round) + "-299"), std::string::npos);
  }
}

TEST_F(CapsulefsTest, AMistypedFolderIsRefusedAndLeftUnmade) {
  auto typo = RunProgram("./capsulefs", {root_ + "/no-such-capsule", mnt_, "-f"});
  EXPECT_EQ(typo.exit_code, 1);
  EXPECT_FALSE(typo.err.empty());
  EXPECT_FALSE(PathExists(root_ + "/no-such-capsule")) << "nothing is made at a path that holds no capsule";
}

// A mountpoint must be an empty directory that is not mounted already: capsulefs refuses a
// file, a folder with files in it, and an active mount (which it would hide), and leaves
// each as it was.
// Deleted means deleted: a file written and then removed (or overwritten) through the mount
// leaves no blob behind once the mount checkpoints (here, a freeze), so it is in no export.
TEST_F(CapsulefsTest, ContentDeletedThroughTheMountLeavesTheCapsuleAtTheNextCheckpoint) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(F("secret.txt"), "SECRET-VALUE-4711"), 0);
  ASSERT_EQ(Put(F("notes.txt"), "FIRST-DRAFT-0815"), 0);
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
  std::string secret_blob = dir_ + "/artifacts/blobs/" + Sha256Hex("SECRET-VALUE-4711");
  std::string draft_blob = dir_ + "/artifacts/blobs/" + Sha256Hex("FIRST-DRAFT-0815");
  ASSERT_TRUE(PathExists(secret_blob));
  ASSERT_EQ(::unlink(F("secret.txt").c_str()), 0);
  ASSERT_EQ(Put(F("notes.txt"), "SECOND-DRAFT"), 0);
  ASSERT_EQ(RunCapsule({"freeze", mnt_}).exit_code, 0);
  EXPECT_FALSE(PathExists(secret_blob));
  EXPECT_FALSE(PathExists(draft_blob));
  EXPECT_EQ(Slurp(dir_ + "/manifest.json").find(Sha256Hex("SECRET-VALUE-4711")), std::string::npos);
  auto exported = RunCapsule({"export", dir_, "-o", "-"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_EQ(exported.out.find("SECRET-VALUE-4711"), std::string::npos);
  EXPECT_EQ(exported.out.find("FIRST-DRAFT-0815"), std::string::npos);
  EXPECT_NE(exported.out.find("SECOND-DRAFT"), std::string::npos);
  ExpectVerifies();
  ASSERT_EQ(RunCapsule({"thaw", mnt_}).exit_code, 0);
}

TEST_F(CapsulefsTest, AMountpointThatIsNotAnEmptyUnmountedDirectoryIsRefused) {
  std::string file = root_ + "/file", full = root_ + "/full";
  ASSERT_TRUE(WriteFileAtomic(file, "x").ok());
  ASSERT_TRUE(MakeDirectories(full).ok());
  ASSERT_TRUE(WriteFileAtomic(full + "/kept.txt", "kept").ok());
  auto on_file = RunProgram("./capsulefs", {dir_, file});
  EXPECT_EQ(on_file.exit_code, 1);
  EXPECT_NE(on_file.err.find("not a directory"), std::string::npos) << on_file.err;
  auto on_full = RunProgram("./capsulefs", {dir_, full});
  EXPECT_EQ(on_full.exit_code, 1);
  EXPECT_NE(on_full.err.find("not empty"), std::string::npos) << on_full.err;
  EXPECT_FALSE(IsMounted(full));
  EXPECT_EQ(Slurp(full + "/kept.txt"), "kept");

  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  std::string other = root_ + "/other";
  auto init = RunCapsule({"init", other, "--id", "agent-2", "--name", "Other"});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  auto over = RunProgram("./capsulefs", {other, mnt_});
  EXPECT_EQ(over.exit_code, 1);
  EXPECT_NE(over.err.find("already a mountpoint"), std::string::npos) << over.err;
  EXPECT_NE(RunCapsule({"status", mnt_}).out.find("agent-1"), std::string::npos);  // still the first agent
}

// A signature.json beside the manifest (what tar -x of a signed export leaves) attests that
// export, not the state at rest: a checkpoint never names it, so the capsule still exports
// signed.
TEST_F(CapsulefsTest, ACheckpointLeavesAnExportsSignatureOutOfTheManifest) {
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/signature.json", R"({"signature":"00"})").ok());
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("after.txt"), "written through the mount"), 0);
    ASSERT_EQ(mount.Unmount(), 0);
  }
  EXPECT_EQ(Slurp(dir_ + "/manifest.json").find("signature.json"), std::string::npos);
  ExpectVerifies();
  auto key = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/sign.key"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  auto exported = RunCapsule({"export", dir_, "-o", root_ + "/signed.tar", "--sign", root_ + "/sign.key"});
  EXPECT_EQ(exported.exit_code, 0) << exported.err;
}

TEST_F(CapsulefsTest, TermCommitsWhatIsStillOpen) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  int fd = ::open(F("open.txt").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "kept", 4), 4);
  ::kill(mount.pid(), SIGTERM);
  int status = 0;
  ::waitpid(mount.pid(), &status, 0);
  ::close(fd);
  RunProgram("fusermount3", {"-u", "-z", mnt_});
  EXPECT_NE(Slurp(dir_ + "/artifacts/snapshot.json").find("open.txt"), std::string::npos);
  ExpectVerifies();
}

}  // namespace
}  // namespace capsule
