// Owners in the mount, through the real binaries. Needs real root (it acts as another user),
// so it runs outside Bazel's sandbox, whose user namespace maps root alone.
#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

class OwnersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("owners");
    dir_ = root_ + "/cap";
    mnt_ = root_ + "/mnt";
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    auto init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  std::string F(const std::string& rel) { return mnt_ + "/files/" + rel; }

  std::string root_, dir_, mnt_;
};

// Owners as on any file system: a new entry belongs to whoever made it, root may chown, an
// owner may not give a file away, the kernel checks access (default_permissions), and owners
// are kept in the snapshot across a remount and an export and import.
TEST_F(OwnersTest, OwnersComeFromTheCallerAndAreKept) {
  constexpr uid_t kUser = 4321;
  constexpr gid_t kGroup = 8765;
  {
    Mount mount(dir_, mnt_, "allow_other");
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(::chmod(F("").c_str(), 0777), 0);
    ASSERT_EQ(Put(F("root.txt"), "r"), 0);
    ASSERT_EQ(::chmod(F("root.txt").c_str(), 0600), 0);
    pid_t child = ::fork();
    if (child == 0) {
      // Into files/ first: the user cannot pass through the folders above it (/root, say).
      if (::chdir(F("").c_str()) != 0) ::_exit(9);
      if (::setgroups(0, nullptr) != 0 || ::setgid(kGroup) != 0 || ::setuid(kUser) != 0) ::_exit(10);
      if (Put("mine.txt", "m") != 0) ::_exit(11);
      if (::mkdir("mydir", 0755) != 0) ::_exit(12);
      int fd = ::open("root.txt", O_RDONLY);
      if (fd >= 0 || errno != EACCES) ::_exit(13);  // the kernel checks the mode against the owner
      if (::chown("mine.txt", 0, kGroup) == 0 || errno != EPERM) ::_exit(14);  // no giving away
      ::_exit(0);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "the step that failed (see the child's exit codes)";
    struct stat st;
    ASSERT_EQ(::stat(F("mine.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kUser);
    EXPECT_EQ(st.st_gid, kGroup);
    ASSERT_EQ(::stat(F("mydir").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, kUser);
    ASSERT_EQ(::chown(F("root.txt").c_str(), 1000, 1001), 0) << std::strerror(errno);
    ASSERT_EQ(::stat(F("root.txt").c_str(), &st), 0);
    EXPECT_EQ(st.st_uid, 1000u);
    EXPECT_EQ(st.st_gid, 1001u);
  }
  Mount again(dir_, mnt_);
  ASSERT_TRUE(again.up());
  struct stat st;
  ASSERT_EQ(::stat(F("mine.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, kUser);
  EXPECT_EQ(st.st_gid, kGroup);
  ASSERT_EQ(::stat(F("root.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000u);
  std::string snapshot = Slurp(dir_ + "/artifacts/snapshot.json");
  EXPECT_NE(snapshot.find(R"("mine.txt":{"gid":8765,"mode":420,)"), std::string::npos) << snapshot;
  auto exported = RunCapsule({"export", dir_, "-o", root_ + "/owners.tar"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  ASSERT_EQ(RunCapsule({"import", root_ + "/owners.tar", root_ + "/owners"}).exit_code, 0);
  EXPECT_EQ(Slurp(root_ + "/owners/artifacts/snapshot.json"), snapshot);
}

}  // namespace
}  // namespace capsule
