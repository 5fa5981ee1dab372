// End-to-end tests of what capsulefs, running as root, reads in the capsule folder: every file
// is read beneath the folder it holds open, never through a link. A file of the capsule swapped
// for a link to a root-only file during a mount is never read (its bytes appear nowhere: not
// through the mount, not in capsule verify, not as a digest in a checkpointed manifest) and
// never written (the file keeps its fingerprint); the operation fails naming the path.
//
// And what a mount's checkpoint seals: only what the mount itself wrote. A file edited beside
// a running mount keeps its manifest entry, and capsule verify names it after the unmount.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/harness.h"
#include "capsule/format/layout.h"
#include "capsule/format/local_files.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunProgram;

// The root-only file a link is pointed at: bytes no one may find anywhere else.
constexpr char kSecret[] = "ROOT-ONLY 5f0c1e9a bytes that must never leave this file\n";

// The file's content, size, inode and times: equal before and after means it was not written.
std::string Fingerprint(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return "<missing>";
  Result<std::string> bytes = ReadFile(path);
  return (bytes.ok() ? *bytes : "<unreadable>") + " " + std::to_string(st.st_ino) + " " + std::to_string(st.st_size) +
         " " + std::to_string(st.st_mtim.tv_sec) + "." + std::to_string(st.st_mtim.tv_nsec) + " " +
         std::to_string(st.st_ctim.tv_sec) + "." + std::to_string(st.st_ctim.tv_nsec);
}

// `cat path` through the real kernel: what it printed and whether it failed.
testing::RunResult Cat(const std::string& path) { return RunProgram("cat", {path}); }

class BeneathTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/beneath.XXXXXX";
    ASSERT_NE(::mkdtemp(pattern), nullptr);
    root_ = pattern;
    dir_ = root_ + "/cap";
    mnt_ = root_ + "/mnt";
    secret_ = root_ + "/outside/secret";  // stands for a root-only file (/root/.ssh/id_ed25519, say)
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(MakeDirectories(root_ + "/outside").ok());
    ASSERT_TRUE(WriteFileAtomic(secret_, kSecret, 0600).ok());
    secret_sha_ = Sha256Hex(kSecret);
    auto init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    // A harness file and a journal line, written through a first mount and sealed by it.
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt_ + "/harness/instructions.md", "Be brief.\n"), 0);
    ASSERT_EQ(Put(mnt_ + "/" + kJournalPath, "{\"type\":\"user_message\",\"data\":{\"text\":\"hello\"}}\n",
                  O_WRONLY | O_APPEND),
              0);
    ASSERT_EQ(mount.Unmount(), 0);
    auto verified = RunCapsule({"verify", dir_});
    ASSERT_EQ(verified.exit_code, 0) << verified.out << verified.err;
  }
  void TearDown() override {
    testing::UnmountPath(mnt_);
    (void)RemoveTree(root_);
  }

  // Outside the capsule: where SwapForLink keeps the file it moved away.
  std::string Moved(const std::string& rel) { return root_ + "/moved-" + BaseName(rel); }
  // Moves the capsule's file `rel` away and puts a link to the secret there.
  void SwapForLink(const std::string& rel) {
    ASSERT_EQ(::rename((dir_ + "/" + rel).c_str(), Moved(rel).c_str()), 0) << rel;
    ASSERT_EQ(::symlink(secret_.c_str(), (dir_ + "/" + rel).c_str()), 0) << rel;
  }
  // The link, if still there, goes; the file comes back.
  void PutBack(const std::string& rel) {
    struct stat st;
    if (::lstat((dir_ + "/" + rel).c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
      ASSERT_EQ(::unlink((dir_ + "/" + rel).c_str()), 0) << rel;
    }
    ASSERT_EQ(::rename(Moved(rel).c_str(), (dir_ + "/" + rel).c_str()), 0) << rel;
  }
  // The secret's bytes and digest appear nowhere in `text`.
  void ExpectNoSecret(const std::string& text, const std::string& where) {
    EXPECT_EQ(text.find("5f0c1e9a"), std::string::npos) << where << ": " << text;
    EXPECT_EQ(text.find(secret_sha_), std::string::npos) << where << " names the secret's digest: " << text;
  }
  std::string Manifest() {
    Result<std::string> text = ReadFile(dir_ + "/" + kManifestPath);
    return text.ok() ? *text : "<" + text.status().message() + ">";
  }

  std::string root_, dir_, mnt_, secret_, secret_sha_;
};

// Files the mount shows and reads: each swapped for a link while mounted is not served (cat
// fails, its bytes never come through), not sealed at the unmount's checkpoint, and named by
// capsule verify afterwards; the secret is never written.
TEST_F(BeneathTest, AFileSwappedForALinkDuringAMountIsNeitherReadNorSealed) {
  const std::string before = Fingerprint(secret_);
  for (const std::string& rel : {std::string(kInstructionsPath), std::string(kWorkingMemoryPath)}) {
    SCOPED_TRACE(rel);
    {
      Mount mount(dir_, mnt_);
      ASSERT_TRUE(mount.up());
      // Read once first: the next open of the file goes straight to the mount.
      auto first = Cat(mnt_ + "/" + rel);
      ASSERT_EQ(first.exit_code, 0) << first.err;
      ASSERT_NO_FATAL_FAILURE(SwapForLink(rel));
      auto read = Cat(mnt_ + "/" + rel);
      EXPECT_NE(read.exit_code, 0) << "a link where a file belongs is not served: " << read.out;
      ExpectNoSecret(read.out, "through the mount");
      EXPECT_EQ(mount.Unmount(), 0);
    }
    ExpectNoSecret(Manifest(), "the checkpointed manifest");
    EXPECT_EQ(Fingerprint(secret_), before) << "nothing is written through the link";
    auto verified = RunCapsule({"verify", dir_});
    EXPECT_NE(verified.exit_code, 0);
    EXPECT_NE((verified.out + verified.err).find(rel + ": not a regular file"), std::string::npos)
        << verified.out << verified.err;
    ExpectNoSecret(verified.out + verified.err, "capsule verify");
    ASSERT_NO_FATAL_FAILURE(PutBack(rel));
    auto again = RunCapsule({"verify", dir_});
    EXPECT_EQ(again.exit_code, 0) << "put back, the file is the one the manifest kept: " << again.out << again.err;
  }
}

// A folder of the capsule the mount reads from (not one it holds open) swapped for a link to a
// root-only folder holding files of the same names: nothing in it is served through the mount,
// hashed into the manifest, or written; capsule verify names the link after the unmount.
TEST_F(BeneathTest, AFolderSwappedForALinkIsNotReadThrough) {
  const std::string decoy = root_ + "/outside/decoy";
  ASSERT_TRUE(MakeDirectories(decoy).ok());
  ASSERT_TRUE(WriteFileAtomic(decoy + "/instructions.md", kSecret, 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(decoy + "/working_memory.md", kSecret, 0600).ok());
  ASSERT_TRUE(WriteFileAtomic(decoy + "/timeline_events.jsonl", kSecret, 0600).ok());
  for (const std::string& folder : {std::string("harness"), std::string("memory")}) {
    SCOPED_TRACE(folder);
    const std::string file = folder == "harness" ? kInstructionsPath : kWorkingMemoryPath;
    const std::string before = Fingerprint(decoy + "/" + BaseName(file));
    {
      Mount mount(dir_, mnt_);
      ASSERT_TRUE(mount.up());
      // Read once first: the kernel and the mount now know the file, and the next open goes
      // straight to the mount without a walk that would show the link as a link.
      auto first = Cat(mnt_ + "/" + file);
      ASSERT_EQ(first.exit_code, 0) << first.err;
      ASSERT_FALSE(first.out.empty());
      ASSERT_EQ(::rename((dir_ + "/" + folder).c_str(), Moved(folder).c_str()), 0);
      ASSERT_EQ(::symlink(decoy.c_str(), (dir_ + "/" + folder).c_str()), 0);
      auto read = Cat(mnt_ + "/" + file);
      EXPECT_NE(read.exit_code, 0) << "nothing is read through the link: " << read.out;
      ExpectNoSecret(read.out, "through the mount");
      EXPECT_EQ(mount.Unmount(), 0);
    }
    EXPECT_EQ(Fingerprint(decoy + "/" + BaseName(file)), before) << "nothing is written through the link";
    ExpectNoSecret(Manifest(), "the checkpointed manifest");
    auto verified = RunCapsule({"verify", dir_});
    EXPECT_NE(verified.exit_code, 0);
    EXPECT_NE((verified.out + verified.err).find(folder + ": not a regular file"), std::string::npos)
        << verified.out << verified.err;
    ExpectNoSecret(verified.out + verified.err, "capsule verify");
    ASSERT_EQ(::unlink((dir_ + "/" + folder).c_str()), 0);
    ASSERT_EQ(::rename(Moved(folder).c_str(), (dir_ + "/" + folder).c_str()), 0);
    auto again = RunCapsule({"verify", dir_});
    EXPECT_EQ(again.exit_code, 0) << "put back, the folder is the one the manifest kept: " << again.out << again.err;
  }
}

// manifest.json and the snapshot swapped for links while mounted: the mount shows its own
// (rendered from what it holds, never read again from the disk), and the unmount's checkpoint
// replaces each link with the file it writes (renamed over it, never written through it).
TEST_F(BeneathTest, AManifestOrSnapshotSwappedForALinkIsReplacedNotFollowed) {
  const std::string before = Fingerprint(secret_);
  for (const std::string& rel : {std::string(kManifestPath), std::string(kSnapshotPath)}) {
    SCOPED_TRACE(rel);
    {
      Mount mount(dir_, mnt_);
      ASSERT_TRUE(mount.up());
      ASSERT_NO_FATAL_FAILURE(SwapForLink(rel));
      auto read = Cat(mnt_ + "/" + rel);
      EXPECT_EQ(read.exit_code, 0) << read.err;
      EXPECT_EQ(read.out.rfind("{", 0), 0u) << "the mount's own JSON: " << read.out;
      ExpectNoSecret(read.out, "through the mount");
      EXPECT_EQ(mount.Unmount(), 0);
    }
    EXPECT_EQ(Fingerprint(secret_), before) << "nothing is written through the link";
    struct stat st;
    ASSERT_EQ(::lstat((dir_ + "/" + rel).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "the checkpoint's file replaced the link";
    ExpectNoSecret(Manifest(), "the checkpointed manifest");
    auto verified = RunCapsule({"verify", dir_});
    EXPECT_EQ(verified.exit_code, 0) << verified.out << verified.err;
    ASSERT_EQ(::unlink(Moved(rel).c_str()), 0);
  }
}

// The journal and its lock swapped for links: an append through the mount, and one by
// capsule log append beside it, fail naming the file; neither reads nor writes the secret.
TEST_F(BeneathTest, TheJournalAndItsLockSwappedForLinksAreRefused) {
  const std::string before = Fingerprint(secret_);
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_NO_FATAL_FAILURE(SwapForLink(kJournalPath));
    EXPECT_NE(Put(mnt_ + "/" + kJournalPath, "{\"type\":\"user_message\",\"data\":{\"text\":\"through\"}}\n",
                  O_WRONLY | O_APPEND),
              0)
        << "an append to a journal that is now a link fails";
    ExpectNoSecret(Cat(mnt_ + "/" + kJournalPath).out, "the journal through the mount");
    EXPECT_EQ(Fingerprint(secret_), before) << "no event line is appended to the link's target";
    ASSERT_NO_FATAL_FAILURE(PutBack(kJournalPath));

    ASSERT_NO_FATAL_FAILURE(SwapForLink(local::kJournalLock));
    auto appended = RunCapsule({"log", "append", dir_, "--type", "user_message", "--data", "{\"text\":\"beside\"}"});
    EXPECT_NE(appended.exit_code, 0) << appended.out;
    EXPECT_NE(appended.err.find(dir_ + "/" + local::kJournalLock + ": reached through a link; links are never followed"),
              std::string::npos)
        << appended.err;
    EXPECT_EQ(Fingerprint(secret_), before);
    ASSERT_NO_FATAL_FAILURE(PutBack(local::kJournalLock));
    EXPECT_EQ(mount.Unmount(), 0);
  }
  EXPECT_EQ(Fingerprint(secret_), before);
  ExpectNoSecret(Manifest(), "the checkpointed manifest");
  auto verified = RunCapsule({"verify", dir_});
  EXPECT_EQ(verified.exit_code, 0) << verified.out << verified.err;
}

// A file edited beside a running mount (by someone who may write the capsule folder) is not
// sealed by the mount's checkpoint: the manifest keeps the digest it had, capsule verify names
// the file after the unmount, and capsule accept takes the edit on purpose. A file the mount
// itself wrote meanwhile is sealed as usual.
TEST_F(BeneathTest, AnEditBesideAMountIsNotSealed) {
  const std::string notes = dir_ + "/" + kWorkingMemoryPath;
  Result<std::string> original = ReadFile(notes);
  ASSERT_TRUE(original.ok());
  const std::string old_digest = Sha256Hex(*original);
  const std::string edited = "edited beside the mount\n";
  const std::string written = "Written through the mount.\n";
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_TRUE(WriteFileAtomic(notes, edited).ok());
    ASSERT_EQ(Put(mnt_ + "/harness/instructions.md", written), 0);
    EXPECT_EQ(mount.Unmount(), 0);
  }
  const std::string manifest = Manifest();
  EXPECT_NE(manifest.find(old_digest), std::string::npos) << "the manifest keeps the old digest: " << manifest;
  EXPECT_EQ(manifest.find(Sha256Hex(edited)), std::string::npos) << "the edit is not sealed: " << manifest;
  EXPECT_NE(manifest.find(Sha256Hex(written)), std::string::npos) << "the mount's own write is sealed: " << manifest;
  auto verified = RunCapsule({"verify", dir_});
  EXPECT_NE(verified.exit_code, 0);
  EXPECT_NE((verified.out + verified.err).find(std::string(kWorkingMemoryPath)), std::string::npos)
      << verified.out << verified.err;
  EXPECT_EQ((verified.out + verified.err).find("harness/instructions.md"), std::string::npos)
      << "only the edit beside the mount is named: " << verified.out << verified.err;
  auto accepted = RunCapsule({"accept", dir_});
  EXPECT_EQ(accepted.exit_code, 0) << accepted.out << accepted.err;
  auto again = RunCapsule({"verify", dir_});
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
}

}  // namespace
}  // namespace capsule
