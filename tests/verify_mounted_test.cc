// `capsule verify` of a capsule a capsulefs serves, through the real binaries: it checks the
// last checkpoint and says so; what the mount wrote since (a workspace file's new blob, the
// working memory) is pending, never called corrupt; damage is still found, in a blob the
// checkpoint lists, in a blob the mount wrote since, and in a file edited beside the mount.
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/temp_dir.h"
#include "capsule/format/layout.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunResult;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Overwrites the first byte of the file at `path` (same size, other bytes).
void Damage(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0) << path;
  ASSERT_EQ(::pwrite(fd, "#", 1, 0), 1);
  ::close(fd);
}

class VerifyMountedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("verifymnt");
    dir_ = root_ + "/agent";
    mnt_ = root_ + "/mnt";
    ASSERT_TRUE(MakeDirectories(root_ + "/ws").ok());
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/ws/kept.txt", "kept since the checkpoint\n").ok());
    RunResult init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", root_ + "/ws"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  std::string root_, dir_, mnt_;
};

TEST_F(VerifyMountedTest, ChecksTheLastCheckpointAndCallsTheMountsWritesPending) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string written = "written through the mount after its checkpoint\n";
  ASSERT_EQ(Put(mnt_ + "/files/new.txt", written), 0);
  ASSERT_EQ(Put(mnt_ + "/" + kWorkingMemoryPath, "a note\n", O_WRONLY | O_APPEND), 0);

  for (const std::string& path : {dir_, mnt_}) {  // the folder, or its mountpoint
    RunResult run = RunCapsule({"verify", path});
    EXPECT_EQ(run.exit_code, 0) << run.out << run.err;
    EXPECT_TRUE(Contains(run.out, "checked the last checkpoint: a capsulefs serves ")) << run.out;
    EXPECT_TRUE(Contains(run.out, "pending: " + BlobPath(Sha256Hex(written)) + ": not in manifest")) << run.out;
    EXPECT_TRUE(Contains(run.out, std::string("pending: ") + kWorkingMemoryPath + ": size mismatch")) << run.out;
    EXPECT_FALSE(Contains(run.err, "corrupt")) << run.err;
    EXPECT_TRUE(Contains(run.out, "\nok: ")) << run.out;
  }
  RunResult json = RunCapsule({"verify", dir_, "--json"});
  EXPECT_EQ(json.exit_code, 0) << json.out << json.err;
  EXPECT_TRUE(Contains(json.out, "\"checked\":\"last checkpoint\"")) << json.out;

  // After the unmount's checkpoint nothing is pending: the mount's writes are listed.
  ASSERT_EQ(mount.Unmount(), 0);
  RunResult after = RunCapsule({"verify", dir_});
  EXPECT_EQ(after.exit_code, 0) << after.out << after.err;
  EXPECT_FALSE(Contains(after.out, "checked the last checkpoint")) << after.out;
  EXPECT_FALSE(Contains(after.out, "pending")) << after.out;
}

TEST_F(VerifyMountedTest, DamageUnderAMountIsStillFound) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string written = "a blob stored since the checkpoint\n";
  ASSERT_EQ(Put(mnt_ + "/files/new.txt", written), 0);
  const std::string kept_blob = BlobPath(Sha256Hex("kept since the checkpoint\n"));
  const std::string new_blob = BlobPath(Sha256Hex(written));
  Damage(dir_ + "/" + kept_blob);
  Damage(dir_ + "/" + new_blob);
  Damage(dir_ + "/" + kEnvironmentSpecPath);  // beside the mount: no write of its recorded

  RunResult run = RunCapsule({"verify", dir_});
  EXPECT_EQ(run.exit_code, 1) << run.out << run.err;
  EXPECT_TRUE(Contains(run.out, "checked the last checkpoint")) << run.out;
  EXPECT_TRUE(Contains(run.out, "\n" + kept_blob + ": blob digest does not match its name")) << run.out;
  EXPECT_TRUE(Contains(run.out, "\n" + new_blob + ": blob digest does not match its name")) << run.out;
  EXPECT_TRUE(Contains(run.out, std::string("\n") + kEnvironmentSpecPath + ": digest mismatch")) << run.out;
  EXPECT_TRUE(Contains(run.err, "does not verify (")) << run.err;
}

}  // namespace
}  // namespace capsule
