// End-to-end tests of what the `capsule` command line, run as root, does in a capsule folder at
// rest where a folder or file was swapped for a link to a place only root may write (/root/.ssh,
// say) before the command ran: each command group opens the capsule folder once and reaches
// every file beneath it without following a link, so the command is refused naming the path,
// and nothing is read from or written through the link (the place it points to keeps its
// fingerprint).
//
// Groups: the documents written at rest (schedule pause, narrow, attach), a move's state
// under .capsule (capsule move), the mount lock a reader waits on (verify, export).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/fingerprint.h"

namespace capsule {
namespace {

using testing::FolderFingerprint;
using testing::RunCapsule;
using testing::RunResult;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class CommandLinksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/command-links.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/cap";
    outside_ = root_ + "/outside";  // stands for a folder only root may write
    ASSERT_TRUE(MakeDirectories(outside_).ok());
    ASSERT_TRUE(WriteFileAtomic(outside_ + "/keep.txt", "root's own\n", 0600).ok());
    RunResult init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void TearDown() override { (void)RemoveTree(root_); }

  // Puts a link to the outside folder where the capsule's folder `rel` belongs; what was there
  // moves aside, and (when `copy_into_outside`) into the outside folder too, so that the place
  // the link points to looks as the capsule's own would.
  void SwapFolderForLink(const std::string& rel, bool copy_into_outside = false) {
    const std::string at = dir_ + "/" + rel;
    struct stat st;
    if (::lstat(at.c_str(), &st) == 0) {
      if (copy_into_outside) {
        ASSERT_EQ(testing::Shell("cp -a " + at + "/. " + outside_ + "/"), 0);
      }
      ASSERT_EQ(::rename(at.c_str(), (root_ + "/aside").c_str()), 0) << rel;
    }
    ASSERT_EQ(::symlink(outside_.c_str(), at.c_str()), 0) << rel;
  }

  // `args` run against the capsule with `rel` swapped: refused, naming the link, and the
  // outside folder untouched.
  void ExpectRefusedAndUntouched(const std::vector<std::string>& args, const std::string& named,
                                 const std::string& stdin_text = "") {
    const std::string before = FolderFingerprint(outside_);
    RunResult run = RunCapsule(args, stdin_text);
    EXPECT_EQ(run.exit_code, 1) << args[0] << ": " << run.out << run.err;
    EXPECT_TRUE(Contains(run.err, named)) << args[0] << " names " << named << ": " << run.err;
    EXPECT_TRUE(Contains(run.err, "link")) << args[0] << " says why: " << run.err;
    EXPECT_EQ(FolderFingerprint(outside_), before) << args[0] << ": nothing is written through the link";
  }

  std::string root_, dir_, outside_;
};

// schedule pause writes schedule/state.json at rest: with schedule/ a link, it is refused and
// no state.json appears where the link points.
TEST_F(CommandLinksTest, SchedulePauseDoesNotWriteThroughALinkedFolder) {
  SwapFolderForLink("schedule");
  ExpectRefusedAndUntouched({"schedule", "pause", dir_}, "schedule");
}

// narrow writes harness/threads/THREAD.json: harness/ a link, nothing lands outside.
TEST_F(CommandLinksTest, NarrowDoesNotWriteThroughALinkedFolder) {
  SwapFolderForLink("harness");
  ExpectRefusedAndUntouched({"narrow", dir_, "main", "--tools", "read_file"}, "harness");
}

// attach stores memory/attachments/<sha>: memory/ a link, nothing lands outside.
TEST_F(CommandLinksTest, AttachDoesNotWriteThroughALinkedFolder) {
  const std::string file = root_ + "/note.txt";
  ASSERT_TRUE(WriteFileAtomic(file, "a note\n").ok());
  SwapFolderForLink("memory");
  ExpectRefusedAndUntouched({"attach", dir_, file}, "memory");
}

// capsule move takes .capsule/move.lock and reads .capsule/outgoing-move.json before it dials:
// with .capsule a link to a folder that looks like the capsule's own, neither the lock nor
// anything else is made there, and no record there is read (the move is refused at once).
TEST_F(CommandLinksTest, MoveDoesNotLockOrReadThroughALinkedStateFolder) {
  SwapFolderForLink(".capsule", /*copy_into_outside=*/true);
  ExpectRefusedAndUntouched({"move", dir_, "--to", "127.0.0.1:9", "--cert", root_ + "/none.pem", "--key",
                             root_ + "/none.pem", "--ca", root_ + "/none.pem"},
                            ".capsule");
  struct stat st;
  EXPECT_NE(::lstat((outside_ + "/move.lock").c_str(), &st), 0) << "no lock file made through the link";
}

// verify and export wait on .capsule/mount.lock for a driver finishing its unmount: the lock
// file swapped for a link to a file outside is refused, never opened.
TEST_F(CommandLinksTest, VerifyAndExportDoNotOpenALinkedMountLock) {
  const std::string lock = dir_ + "/.capsule/mount.lock";
  (void)::unlink(lock.c_str());
  ASSERT_EQ(::symlink((outside_ + "/keep.txt").c_str(), lock.c_str()), 0);
  ExpectRefusedAndUntouched({"verify", dir_}, "mount.lock");
  ExpectRefusedAndUntouched({"export", dir_, "-o", root_ + "/out.tar"}, "mount.lock");
  struct stat st;
  EXPECT_NE(::lstat((root_ + "/out.tar").c_str(), &st), 0) << "nothing exported";
}

}  // namespace
}  // namespace capsule
