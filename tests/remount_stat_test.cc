// A remount shows the workspace as the last mount left it, through the real binaries: every
// entry's inode number and its three times (access, modification, change) are the same before
// and after, hard links keep one number; and git status after a remount finds every file
// unchanged by its stat alone: it reads none of them (the driver's count of read requests), and
// leaves its index as it was (it rewrites it when a stat differs, after reading the file).
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/temp_dir.h"
#include "fs/control_client.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunResult;
using testing::Shell;

struct Shown {
  ino_t ino;
  nlink_t nlink;
  mode_t mode;
  off_t size;
  struct timespec atime, mtime, ctime;
};

bool operator==(const struct timespec& a, const struct timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

std::string Describe(const Shown& s) {
  auto t = [](const struct timespec& ts) { return std::to_string(ts.tv_sec) + "." + std::to_string(ts.tv_nsec); };
  return "ino " + std::to_string(s.ino) + " nlink " + std::to_string(s.nlink) + " mode " + std::to_string(s.mode) +
         " size " + std::to_string(s.size) + " atime " + t(s.atime) + " mtime " + t(s.mtime) + " ctime " + t(s.ctime);
}

std::map<std::string, Shown>* g_walk = nullptr;
std::string g_base;

int Visit(const char* path, const struct stat* st, int, struct FTW*) {
  (*g_walk)[std::string(path).substr(g_base.size())] =
      Shown{st->st_ino, st->st_nlink, st->st_mode, st->st_size, st->st_atim, st->st_mtim, st->st_ctim};
  return 0;
}

// lstat of everything under `root` (itself included), by path below it.
std::map<std::string, Shown> StatAll(const std::string& root) {
  std::map<std::string, Shown> walk;
  g_walk = &walk;
  g_base = root;
  EXPECT_EQ(::nftw(root.c_str(), Visit, 16, FTW_PHYS), 0) << root;
  g_walk = nullptr;
  return walk;
}

// The driver's count of read requests for workspace files; -1 when its status is not read.
int64_t WorkspaceReads(const std::string& mnt) {
  Result<std::string> socket = fs::FindControlSocket(mnt);
  if (!socket.ok()) return -1;
  Result<Json> status = fs::SendControl(*socket, "status");
  return status.ok() ? status->value("workspace_reads", int64_t{-1}) : -1;
}

class RemountStatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("remount");
    dir_ = root_ + "/agent";
    mnt_ = root_ + "/mnt";
    ASSERT_TRUE(MakeDirectories(root_ + "/ws/src").ok());
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/ws/src/kept.c", "int kept;\n").ok());
    RunResult init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", root_ + "/ws"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  std::string root_, dir_, mnt_;
};

TEST_F(RemountStatTest, InodeNumbersAndTimesOutliveARemount) {
  std::map<std::string, Shown> before;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    const std::string files = mnt_ + "/files";
    ASSERT_EQ(Shell("mkdir -p " + files + "/new/deep && echo one > " + files + "/new/deep/a.txt && echo two > " +
                    files + "/new/b.txt && ln " + files + "/new/b.txt " + files + "/new/b-link.txt && ln -s b.txt " +
                    files + "/new/sym && chmod 600 " + files + "/src/kept.c && touch -a -d '2021-03-04 05:06:07' " +
                    files + "/new/deep/a.txt && mv " + files + "/new/deep/a.txt " + files + "/new/deep/moved.txt"),
              0);
    before = StatAll(files);
    ASSERT_EQ(mount.Unmount(), 0);
  }
  ASSERT_GE(before.size(), 8u);
  EXPECT_EQ(before["/new/b.txt"].ino, before["/new/b-link.txt"].ino);
  EXPECT_EQ(before["/new/deep/moved.txt"].atime.tv_sec, 1614834367) << "touch -a set it (UTC)";

  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  std::map<std::string, Shown> after = StatAll(mnt_ + "/files");
  ASSERT_EQ(after.size(), before.size());
  for (const auto& [path, shown] : before) {
    auto it = after.find(path);
    ASSERT_NE(it, after.end()) << path;
    const Shown& now = it->second;
    EXPECT_TRUE(shown.ino == now.ino && shown.nlink == now.nlink && shown.mode == now.mode && shown.size == now.size &&
                shown.atime == now.atime && shown.mtime == now.mtime && shown.ctime == now.ctime)
        << path << "\n before: " << Describe(shown) << "\n after:  " << Describe(now);
  }
}

TEST_F(RemountStatTest, GitStatusAfterARemountReadsNoFile) {
  const std::string repo = mnt_ + "/files/repo";
  const std::string git = "git -C " + repo + " -c user.name=t -c user.email=t@t ";
  std::string index_before;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Shell("mkdir -p " + repo + " && " + git + "init -q"), 0);
    for (int i = 0; i < 40; ++i) {
      ASSERT_EQ(Put(repo + "/f" + std::to_string(i) + ".txt", "file " + std::to_string(i) + "\n"), 0);
    }
    // Modified well before the index is written: no entry is racily clean (which git would
    // read again whatever its stat says).
    ASSERT_EQ(Shell("touch -d '2020-01-01' " + repo + "/*.txt && " + git + "add . && " + git +
                    "commit -qm one && " + git + "status --porcelain >/dev/null"),
              0);
    Result<std::string> index = ReadFile(repo + "/.git/index");
    ASSERT_TRUE(index.ok());
    index_before = Sha256Hex(*index);
    // Control: another status on the same mount leaves the index as it is.
    ASSERT_EQ(Shell(git + "status --porcelain >/dev/null"), 0);
    index = ReadFile(repo + "/.git/index");
    ASSERT_TRUE(index.ok());
    ASSERT_EQ(Sha256Hex(*index), index_before) << "git refreshed its index without a remount";
    ASSERT_EQ(mount.Unmount(), 0);
  }
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  ASSERT_EQ(WorkspaceReads(mnt_), 0);
  RunResult status = testing::RunProgram("git", {"-C", repo, "status", "--porcelain"});
  EXPECT_EQ(status.exit_code, 0) << status.err;
  EXPECT_EQ(status.out, "");
  // git reads its index and objects' metadata, never a tracked file (40 of them).
  const int64_t reads = WorkspaceReads(mnt_);
  EXPECT_GE(reads, 1) << "the index is read";
  EXPECT_LT(reads, 40) << "git status read the tracked files again";
  Result<std::string> index = ReadFile(repo + "/.git/index");
  ASSERT_TRUE(index.ok());
  EXPECT_EQ(Sha256Hex(*index), index_before)
      << "git status found a stat changed by the remount, read the files and rewrote its index";
}

}  // namespace
}  // namespace capsule
