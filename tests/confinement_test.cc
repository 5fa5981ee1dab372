// End-to-end tests of what keeps capsulefs, running as root, inside the capsule folder and the
// capsule's bytes away from other users: a link put where one of the capsule's folders
// belongs, before and during a mount, is never followed (nothing outside is created, changed
// or removed); blobs and `capsule init --workspace` files are not readable by nobody on disk;
// capsule verify warns on a folder that exposes more; the control channel refuses another
// user by its peer credentials even when the socket's mode lets that user connect.
//
// The attacks that need another user run as nobody (setpriv --reuid=65534), in a folder
// under /tmp that nobody can reach (the test's own temporary folder may not be).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/layout.h"
#include "tests/cli_runner.h"
#include "tests/fingerprint.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::FolderFingerprint;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunProgram;

// As nobody: `program args...`.
testing::RunResult AsNobody(const std::vector<std::string>& command) {
  std::vector<std::string> args = {"--reuid=65534", "--regid=65534", "--clear-groups"};
  args.insert(args.end(), command.begin(), command.end());
  return RunProgram("setpriv", args);
}

class ConfinementTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Under /tmp (1777), in a folder nobody may enter: the test's own temporary folder may be
    // one nobody cannot reach at all, which would refuse nobody for another reason.
    char pattern[] = "/tmp/confinement.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    ASSERT_EQ(::chmod(root_.c_str(), 0755), 0);
    dir_ = root_ + "/cap";
    mnt_ = root_ + "/mnt";
    outside_ = root_ + "/outside";  // stands for a folder only root may write (/root/.ssh, say)
    ws_ = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(MakeDirectories(outside_).ok());
    ASSERT_TRUE(WriteFileAtomic(outside_ + "/keep.txt", "root's own\n").ok());
    ASSERT_TRUE(MakeDirectories(ws_).ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/secret.txt", "only mine\n", 0600).ok());
    auto init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", ws_});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_TRUE(MakeDirectories(dir_ + "/harness").ok());  // as a first mount makes it
    // The capsulefs and capsule binaries, where nobody may run them.
    ASSERT_EQ(testing::Shell("cp ./capsule " + root_ + "/capsule && chmod 0755 " + root_ + "/capsule"), 0);
  }
  void TearDown() override {
    testing::UnmountPath(mnt_);
    (void)RemoveTree(root_);
  }

  // Moves the capsule's folder `rel` away (to `rel`.moved) and puts a link to outside_ there.
  void SwapForLink(const std::string& rel) {
    ASSERT_EQ(::rename((dir_ + "/" + rel).c_str(), (dir_ + "/" + rel + ".moved").c_str()), 0) << rel;
    ASSERT_EQ(::symlink(outside_.c_str(), (dir_ + "/" + rel).c_str()), 0) << rel;
  }
  void PutBack(const std::string& rel) {
    ASSERT_EQ(::unlink((dir_ + "/" + rel).c_str()), 0) << rel;
    ASSERT_EQ(::rename((dir_ + "/" + rel + ".moved").c_str(), (dir_ + "/" + rel).c_str()), 0) << rel;
  }
  std::string F(const std::string& rel) { return mnt_ + "/files/" + rel; }

  std::string root_, dir_, mnt_, outside_, ws_;
};

const char* const kSwapped[] = {"artifacts/blobs", "artifacts", "harness", ".capsule"};

TEST_F(ConfinementTest, ALinkWhereAFolderBelongsIsRefusedBeforeTheMount) {
  for (const char* rel : kSwapped) {
    SCOPED_TRACE(rel);
    const std::string before = FolderFingerprint(outside_);
    ASSERT_NO_FATAL_FAILURE(SwapForLink(rel));
    // Not -f: should the mount be taken, the driver goes to the background (and the test fails).
    auto mounted = RunProgram("./capsulefs", {dir_, mnt_});
    EXPECT_NE(mounted.exit_code, 0);
    EXPECT_FALSE(testing::IsMounted(mnt_));
    EXPECT_NE(mounted.err.find(dir_ + "/" + rel + ": is a link where a folder belongs"), std::string::npos)
        << mounted.err;
    EXPECT_EQ(FolderFingerprint(outside_), before) << "nothing is written through the link";
    ASSERT_NO_FATAL_FAILURE(PutBack(rel));
  }
  Mount mount(dir_, mnt_);
  EXPECT_TRUE(mount.up()) << "the capsule, put back, mounts";
}

// The attack of a folder's owner on a root mount: once the driver serves, a folder it writes
// in is moved away and a link to a root-only folder put in its place; then a workspace file,
// a harness file and the unmount's checkpoint are written through the mount. Each either lands
// inside the capsule (in the folder the mount held open, wherever it was moved) or fails;
// nothing appears, changes or goes outside.
TEST_F(ConfinementTest, ALinkSwappedInDuringAMountIsNeverFollowed) {
  for (const char* rel : kSwapped) {
    SCOPED_TRACE(rel);
    const std::string before = FolderFingerprint(outside_);
    {
      Mount mount(dir_, mnt_, "allow_other");
      ASSERT_TRUE(mount.up());
      ASSERT_EQ(Put(F("first.txt"), "before the swap\n"), 0);
      ASSERT_NO_FATAL_FAILURE(SwapForLink(rel));
      const std::string bytes = std::string("the user's bytes for ") + rel + "\n";
      (void)Put(F(std::string("written-") + BaseName(rel) + ".txt"), bytes);
      (void)Put(mnt_ + "/harness/authorized_keys", "ssh-ed25519 AAAA attacker\n");
      (void)mount.Unmount();
      EXPECT_EQ(FolderFingerprint(outside_), before) << "nothing is written through the link";
      // The blob the write made, when it was made, is in the folder the mount held.
      if (std::string(rel) == "artifacts/blobs") {
        EXPECT_TRUE(PathExists(dir_ + "/artifacts/blobs.moved/" + Sha256Hex(bytes)));
      }
    }
    ASSERT_NO_FATAL_FAILURE(PutBack(rel));
    EXPECT_EQ(FolderFingerprint(outside_), before);
    // What the swap made the checkpoint see (blobs listed under the moved folder's name) is
    // an edit behind the manifest: the next mount refuses it until its owner accepts it.
    auto accepted = RunCapsule({"accept", dir_});
    EXPECT_EQ(accepted.exit_code, 0) << accepted.err;
  }
  // Nothing of the capsule was lost: it mounts, with what was written before the swaps.
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  Result<std::string> first = ReadFile(F("first.txt"));
  ASSERT_TRUE(first.ok()) << first.status().message();
  EXPECT_EQ(*first, "before the swap\n");
}

// The control socket's folder swapped for a link while a mount serves: the unmount removes
// the socket from the folder it was bound in, never a socket of that name where the link
// points.
TEST_F(ConfinementTest, TheControlSocketIsRemovedFromItsOwnFolderNotThroughALink) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  // A socket file of the same name where the link will point (bound by this test).
  ASSERT_EQ(testing::Shell("python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.bind('" + outside_ +
                           "/control.sock')\""),
            0);
  const std::string before = FolderFingerprint(outside_);
  ASSERT_NO_FATAL_FAILURE(SwapForLink(".capsule"));
  (void)mount.Unmount();
  EXPECT_EQ(FolderFingerprint(outside_), before);
  EXPECT_TRUE(PathExists(outside_ + "/control.sock"));
  EXPECT_FALSE(PathExists(dir_ + "/.capsule.moved/control.sock")) << "removed from the folder it was bound in";
  PutBack(".capsule");
}

// The bytes of a refused document are kept aside in .capsule/rejected/: with that folder (or
// one beneath it) a link to a folder only root may write, the keeping fails and says so; the
// bytes never land where the link points.
TEST_F(ConfinementTest, RefusedBytesAreNeverKeptThroughALink) {
  const std::string rejected = dir_ + "/.capsule/rejected";
  for (const std::string& link : std::vector<std::string>{rejected, rejected + "/environment"}) {
    SCOPED_TRACE(link);
    (void)RemoveTree(rejected);
    if (link != rejected) {
      ASSERT_EQ(::mkdir(rejected.c_str(), 0700), 0);
    }
    ASSERT_EQ(::symlink(outside_.c_str(), link.c_str()), 0);
    const std::string before = FolderFingerprint(outside_);
    Mount mount(dir_, mnt_, "allow_other");
    ASSERT_TRUE(mount.up());
    const std::string spec = mnt_ + "/environment/spec.json";
    const std::string old_spec = *ReadFile(spec);
    int fd = ::open(spec.c_str(), O_WRONLY | O_TRUNC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, "{\"env\":", 7), 7);
    EXPECT_EQ(::close(fd), -1) << "a document never finished is refused at its close";
    EXPECT_EQ(*ReadFile(spec), old_spec);
    EXPECT_EQ(mount.Unmount(), 0);
    EXPECT_EQ(FolderFingerprint(outside_), before) << "nothing is written through the link";
    EXPECT_FALSE(PathExists(outside_ + "/spec.json"));
    EXPECT_FALSE(PathExists(outside_ + "/environment/spec.json"));
  }
  // Without the link, the same refusal keeps the bytes, beneath the capsule folder.
  (void)RemoveTree(rejected);
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  int fd = ::open((mnt_ + "/environment/spec.json").c_str(), O_WRONLY | O_TRUNC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "{\"env\":", 7), 7);
  EXPECT_EQ(::close(fd), -1);
  Result<std::string> kept = ReadFile(rejected + "/environment/spec.json");
  ASSERT_TRUE(kept.ok()) << kept.status().message();
  EXPECT_EQ(*kept, "{\"env\":");
}

TEST_F(ConfinementTest, AFolderAnotherUserOwnsIsRefusedUnlessAllowed) {
  ASSERT_EQ(::chown((dir_ + "/harness").c_str(), 65534, 65534), 0);
  auto mounted = RunProgram("./capsulefs", {dir_, mnt_});
  EXPECT_NE(mounted.exit_code, 0);
  EXPECT_NE(mounted.err.find(dir_ + "/harness: owned by uid 65534, not by the mounting user (uid 0) or root: refused"),
            std::string::npos)
      << mounted.err;
  ASSERT_EQ(::chown((dir_ + "/harness").c_str(), 0, 0), 0);
  ASSERT_EQ(::chmod(dir_.c_str(), 0770), 0);
  mounted = RunProgram("./capsulefs", {dir_, mnt_});
  EXPECT_NE(mounted.err.find(dir_ + ": writable by group or others: refused"), std::string::npos) << mounted.err;
  Mount mount(dir_, mnt_, "allow_foreign_owner");
  EXPECT_TRUE(mount.up()) << "-o allow_foreign_owner takes it";
}

// Nobody reads a blob on disk: the capsule folder is 0700 and, for a folder opened wider
// (made by an older capsule, say), each blob is 0600 as well. The same bytes through the mount
// are refused by their own mode; on disk nobody gets them either.
TEST_F(ConfinementTest, NobodyReadsABlobOnDisk) {
  const std::string bytes = "a 0600 file written through the mount\n";
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(F("private.txt"), bytes), 0);
    ASSERT_EQ(::chmod(F("private.txt").c_str(), 0600), 0);
    ASSERT_EQ(mount.Unmount(), 0);
  }
  const std::string blob = dir_ + "/" + BlobPath(Sha256Hex(bytes));
  ASSERT_TRUE(PathExists(blob));
  // Nobody can read a file beside the capsule: the refusals below come from the capsule's modes.
  ASSERT_TRUE(WriteFileAtomic(root_ + "/public.txt", "anyone\n", 0644).ok());
  ASSERT_EQ(AsNobody({"cat", root_ + "/public.txt"}).exit_code, 0) << "nobody must reach the test's folder";
  struct stat st;
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  ASSERT_EQ(::stat(blob.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  auto cat = AsNobody({"cat", blob});
  EXPECT_NE(cat.exit_code, 0);
  EXPECT_NE(cat.err.find("Permission denied"), std::string::npos) << cat.err;
  EXPECT_EQ(cat.out.find("0600 file"), std::string::npos);
  // The folder opened as an older capsule had it: the blob's own mode still refuses.
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/artifacts").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/artifacts/blobs").c_str(), 0755), 0);
  cat = AsNobody({"cat", blob});
  EXPECT_NE(cat.exit_code, 0);
  EXPECT_NE(cat.err.find("Permission denied"), std::string::npos) << cat.err;
}

TEST_F(ConfinementTest, InitWorkspaceKeepsA0600FileFromNobodyOnDisk) {
  const std::string blob = dir_ + "/" + BlobPath(Sha256Hex("only mine\n"));
  ASSERT_TRUE(PathExists(blob));
  ASSERT_TRUE(WriteFileAtomic(root_ + "/public.txt", "anyone\n", 0644).ok());
  ASSERT_EQ(AsNobody({"cat", root_ + "/public.txt"}).exit_code, 0) << "nobody must reach the test's folder";
  auto cat = AsNobody({"cat", blob});
  EXPECT_NE(cat.exit_code, 0);
  EXPECT_NE(cat.err.find("Permission denied"), std::string::npos) << cat.err;
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/artifacts").c_str(), 0755), 0);
  ASSERT_EQ(::chmod((dir_ + "/artifacts/blobs").c_str(), 0755), 0);
  cat = AsNobody({"cat", blob});
  EXPECT_NE(cat.exit_code, 0) << "the blob itself is 0600";
  EXPECT_NE(cat.err.find("Permission denied"), std::string::npos) << cat.err;
}

TEST_F(ConfinementTest, VerifyWarnsOnAFolderThatExposesMore) {
  auto verify = RunCapsule({"verify", dir_});
  ASSERT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(verify.out.find("warning:"), std::string::npos) << verify.out;
  ASSERT_EQ(::chmod(dir_.c_str(), 0755), 0);
  const std::string blob = dir_ + "/" + BlobPath(Sha256Hex("only mine\n"));
  ASSERT_EQ(::chmod(blob.c_str(), 0644), 0);
  verify = RunCapsule({"verify", dir_});
  EXPECT_EQ(verify.exit_code, 0) << "a warning, not a failure: " << verify.out << verify.err;
  EXPECT_NE(verify.out.find("warning: " + dir_ +
                            ": mode 0755 lets group or others into the capsule folder, where every workspace file's "
                            "bytes sit in a blob whatever the file's own mode"),
            std::string::npos)
      << verify.out;
  EXPECT_NE(verify.out.find("warning: artifacts/blobs: 1 blob readable by group or others (chmod 0600 them)"),
            std::string::npos)
      << verify.out;
  auto json = RunCapsule({"verify", dir_, "--json"});
  EXPECT_EQ(json.exit_code, 0);
  EXPECT_NE(json.out.find("\"warnings\":[\"" + dir_ + ": mode 0755 lets group or others"), std::string::npos)
      << json.out;
  EXPECT_NE(json.out.find("\"ok\":true"), std::string::npos) << json.out;
}

// The peer check itself: the socket's mode is opened to everyone (and its folders made
// passable), so that nobody's connection is taken and only SO_PEERCRED can refuse it.
TEST_F(ConfinementTest, TheControlChannelRefusesAnotherUserByItsCredentials) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  const std::string socket = dir_ + "/.capsule/control.sock";
  struct stat st;
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u) << "born 0600";
  ASSERT_EQ(::chmod(dir_.c_str(), 0711), 0);
  ASSERT_EQ(::chmod((dir_ + "/.capsule").c_str(), 0711), 0);
  ASSERT_EQ(::chmod(socket.c_str(), 0666), 0);
  auto freeze = AsNobody({root_ + "/capsule", "freeze", dir_});
  EXPECT_NE(freeze.exit_code, 0) << freeze.out;
  EXPECT_NE(freeze.err.find("control: only root or the mount's owner may use this socket"), std::string::npos)
      << "the refusal must be the peer check's, not the socket's mode: " << freeze.err << freeze.out
      << " (exit " << freeze.exit_code << ")";
  auto status = RunCapsule({"status", mnt_});
  EXPECT_NE(status.out.find("state active"), std::string::npos) << status.out;
  // Root, the mount's owner here, is served through the same socket.
  auto own = RunCapsule({"status", dir_});
  EXPECT_EQ(own.exit_code, 0) << own.err;
}

}  // namespace
}  // namespace capsule
