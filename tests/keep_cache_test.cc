// The kernel's page cache of a workspace file outlives its close, through the real binaries:
// a second open of an unchanged file is served from the cache (the driver's count of read
// requests, in its status, does not move), while a change made through the mount, by a write,
// a rename over the file or a truncating open, is what the next open reads.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/temp_dir.h"
#include "capsule/format/layout.h"
#include "tests/cli_runner.h"
#include "fs/control_client.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunResult;

// The whole file through one open; errno on failure.
int ReadAll(const std::string& path, std::string* text) {
  text->clear();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      int err = errno;
      ::close(fd);
      return err;
    }
    if (n == 0) break;
    text->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return 0;
}

// The driver's count of read requests for workspace files; -1 when its status is not read.
int64_t WorkspaceReads(const std::string& mnt) {
  Result<std::string> socket = fs::FindControlSocket(mnt);
  if (!socket.ok()) return -1;
  Result<Json> status = fs::SendControl(*socket, "status");
  return status.ok() ? status->value("workspace_reads", int64_t{-1}) : -1;
}

class KeepCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("keepcache");
    dir_ = root_ + "/agent";
    mnt_ = root_ + "/mnt";
    ASSERT_TRUE(MakeDirectories(root_ + "/ws").ok());
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(WriteFileAtomic(root_ + "/ws/a.txt", kOriginal).ok());
    RunResult init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", root_ + "/ws"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  static constexpr char kOriginal[] = "the original bytes of a.txt\n";
  std::string root_, dir_, mnt_;
};

TEST_F(KeepCacheTest, AnUnchangedFileIsReadAgainFromThePageCache) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string file = mnt_ + "/files/a.txt";
  std::string text;
  ASSERT_EQ(ReadAll(file, &text), 0);  // the first open fills the cache
  ASSERT_EQ(text, kOriginal);
  const int64_t reads = WorkspaceReads(mnt_);
  ASSERT_GT(reads, 0) << "the first read reached the driver";
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(ReadAll(file, &text), 0);
    EXPECT_EQ(text, kOriginal);
  }
  EXPECT_EQ(WorkspaceReads(mnt_), reads) << "an open of the unchanged file dropped the kernel's cache";
  // Written through the mount: still no read needed, the cache has the write.
  ASSERT_EQ(Put(file, "NEW", O_WRONLY), 0);
  ASSERT_EQ(ReadAll(file, &text), 0);
  EXPECT_EQ(text, std::string("NEW") + (kOriginal + 3));
}

TEST_F(KeepCacheTest, AChangeThroughTheMountIsWhatTheNextOpenReads) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string file = mnt_ + "/files/a.txt";
  std::string text;
  ASSERT_EQ(ReadAll(file, &text), 0);
  ASSERT_EQ(text, kOriginal);
  // A write of the middle, through another open.
  int fd = ::open(file.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, "ORIGINAL", 8, 4), 8);
  ASSERT_EQ(::close(fd), 0);
  ASSERT_EQ(ReadAll(file, &text), 0);
  EXPECT_EQ(text, "the ORIGINAL bytes of a.txt\n");
  // Renamed over: the name's next open reads the other file.
  ASSERT_EQ(Put(mnt_ + "/files/b.txt", "b's bytes\n"), 0);
  ASSERT_EQ(::rename((mnt_ + "/files/b.txt").c_str(), file.c_str()), 0);
  ASSERT_EQ(ReadAll(file, &text), 0);
  EXPECT_EQ(text, "b's bytes\n");
  // Truncated and rewritten through an O_TRUNC open.
  ASSERT_EQ(Put(file, "short\n"), 0);
  ASSERT_EQ(ReadAll(file, &text), 0);
  EXPECT_EQ(text, "short\n");
  // And after a remount (another mount, the cache its own), the committed bytes.
  ASSERT_EQ(mount.Unmount(), 0);
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  ASSERT_EQ(ReadAll(file, &text), 0);
  EXPECT_EQ(text, "short\n");
}

}  // namespace
}  // namespace capsule
