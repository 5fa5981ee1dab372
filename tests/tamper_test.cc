// End-to-end tests of the trust check through the real binaries: a capsule edited behind its
// manifest (notes, the environment spec, a listed file deleted, a file added) is refused by
// capsulefs, capsule exec, capsule stream pack and capsule move, naming the file, until
// capsule accept takes the edits once (an edits_accepted event in the journal); a blob whose
// bytes are not its name is never served by a mount nor packed; and a mount killed with
// SIGKILL remounts without being called tampered.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/temp_dir.h"
#include "capsule/format/attachments.h"
#include "capsule/format/layout.h"
#include "capsule/format/mount_lock.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::IsMounted;
using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::RunProgram;
using testing::RunResult;
using testing::Sidecar;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// How many times `part` occurs in `text`.
size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// errno of reading the whole file at `path` (0 when it read), its bytes in `*text`.
int ReadErrno(const std::string& path, std::string* text = nullptr) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return errno;
  char buffer[4096];
  int err = 0;
  for (;;) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0) {
      err = errno;
      break;
    }
    if (n == 0) break;
    if (text != nullptr) text->append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return err;
}

enum class Edit { kNotes, kSpec, kDeleted, kAdded };

class TamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("tamper");
    dir_ = root_ + "/a/agent-1";
    mnt_ = root_ + "/mnt";
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/src").ok());
    ASSERT_TRUE(MakeDirectories(mnt_).ok());
    ASSERT_TRUE(MakeDirectories(root_ + "/a").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/main.py", "print('hi')\n").ok());
    RunResult init = RunCapsule({"init", dir_, "--id", "agent-1", "--name", "Agent", "--workspace", ws});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  // Edits the capsule behind its manifest; returns the path that then differs.
  std::string Tamper(Edit edit) {
    switch (edit) {
      case Edit::kNotes: {
        std::string notes = dir_ + "/" + kWorkingMemoryPath;
        EXPECT_EQ(Put(notes, "planted instruction\n", O_WRONLY | O_APPEND), 0);
        return kWorkingMemoryPath;
      }
      case Edit::kSpec: {
        std::string spec = dir_ + "/" + kEnvironmentSpecPath;
        Result<std::string> text = ReadFile(spec);
        EXPECT_TRUE(text.ok());
        EXPECT_EQ(Put(spec, (text.ok() ? *text : "") + "\n"), 0);  // still valid JSON, not what was sealed
        return kEnvironmentSpecPath;
      }
      case Edit::kDeleted: {
        // A listed file the layout does not require: an attachment, stored (and listed) first.
        const std::string text = "an attachment\n";
        EXPECT_TRUE(WriteFileAtomic(root_ + "/note.txt", text).ok());
        RunResult attached = RunCapsule({"attach", dir_, root_ + "/note.txt"});
        EXPECT_EQ(attached.exit_code, 0) << attached.err;
        ExpectVerifies();
        const std::string path = AttachmentPath(Sha256Hex(text));
        EXPECT_EQ(::unlink((dir_ + "/" + path).c_str()), 0) << path;
        return path;
      }
      case Edit::kAdded:
        EXPECT_EQ(Put(dir_ + "/memory/planted.md", "not in the manifest\n"), 0);
        return "memory/planted.md";
    }
    return "";
  }

  // ./capsulefs DIR MNT (it daemonises once mounted); a mount that came up is taken away
  // again, its driver awaited.
  RunResult MountOnce() {
    RunResult run = RunProgram("./capsulefs", {dir_, mnt_});
    if (IsMounted(mnt_)) {
      testing::UnmountPath(mnt_);
      EXPECT_TRUE(WaitForDriverToExit(dir_).ok());
    }
    return run;
  }

  RunResult Pack(const std::string& what, const std::string& out) {
    return RunCapsule({"stream", "pack", what, "--phase", "copy", "-o", out});
  }

  void ExpectVerifies() {
    RunResult verify = RunCapsule({"verify", dir_});
    EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  }

  // The refusal of a capsule edited behind its manifest at `path`, in `err`.
  static void ExpectRefusedNaming(const RunResult& run, const std::string& path, const std::string& who) {
    EXPECT_NE(run.exit_code, 0) << who;
    EXPECT_TRUE(Contains(run.err, "edited behind its manifest")) << who << ": " << run.err;
    EXPECT_TRUE(Contains(run.err, path + ": ")) << who << ": " << run.err;
    EXPECT_TRUE(Contains(run.err, "capsule accept")) << who << ": " << run.err;
  }

  std::string root_, dir_, mnt_;
};

class TamperedFileTest : public TamperTest, public ::testing::WithParamInterface<Edit> {};

TEST_P(TamperedFileTest, MountExecPackAndMoveRefuseItNamingTheFileUntilAcceptTakesItOnce) {
  ExpectVerifies();
  const std::string path = Tamper(GetParam());
  RunResult verify = RunCapsule({"verify", dir_});
  ASSERT_NE(verify.exit_code, 0) << "the edit must be one verify finds";
  ASSERT_TRUE(Contains(verify.out, path + ": ")) << verify.out;

  RunResult mounted = MountOnce();
  ExpectRefusedNaming(mounted, path, "capsulefs");
  EXPECT_FALSE(IsMounted(mnt_));
  RunResult exec = RunCapsule({"exec", "--no-sandbox", dir_, "--", "true"});
  ExpectRefusedNaming(exec, path, "capsule exec");
  const std::string stream = root_ + "/out.stream";
  ExpectRefusedNaming(Pack(dir_, stream), path, "capsule stream pack");
  EXPECT_FALSE(PathExists(stream)) << "a refused pack leaves no stream";
  {
    const std::string pki = root_ + "/pki", seal = root_ + "/seal.key", target_root = root_ + "/b";
    ASSERT_TRUE(testing::MakeMoveKeys(pki, seal));
    Sidecar target(target_root, pki, seal);
    RunResult moved = RunCapsule({"move", dir_, "--to", target.address(), "--cert", pki + "/client.pem", "--key",
                                  pki + "/client.key", "--ca", pki + "/ca.pem"});
    ExpectRefusedNaming(moved, path, "capsule move");
    EXPECT_FALSE(PathExists(target_root + "/agent-1")) << "nothing offered, nothing received";
  }
  // Refused and still refused: nothing above re-sealed the edit.
  ASSERT_NE(RunCapsule({"verify", dir_}).exit_code, 0);

  RunResult accepted = RunCapsule({"accept", dir_});
  ASSERT_EQ(accepted.exit_code, 0) << accepted.out << accepted.err;
  EXPECT_TRUE(Contains(accepted.out, path + ": ")) << accepted.out;
  EXPECT_TRUE(Contains(accepted.out, "accepted 1 edit;")) << accepted.out;
  RunResult again = RunCapsule({"accept", dir_});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.out, "nothing to accept: the files are as the manifest lists them\n");
  RunResult log = RunCapsule({"log", dir_, "--json"});
  ASSERT_EQ(log.exit_code, 0) << log.err;
  EXPECT_EQ(Count(log.out, R"("type":"edits_accepted")"), 1u) << log.out;
  EXPECT_EQ(Count(log.out, R"("path":")" + path + R"(")"), 1u) << log.out;

  ExpectVerifies();
  RunResult remounted = MountOnce();
  EXPECT_EQ(remounted.exit_code, 0) << remounted.err;
  ExpectVerifies();
  RunResult packed = Pack(dir_, stream);
  EXPECT_EQ(packed.exit_code, 0) << packed.err;
}

INSTANTIATE_TEST_SUITE_P(Edits, TamperedFileTest,
                         ::testing::Values(Edit::kNotes, Edit::kSpec, Edit::kDeleted, Edit::kAdded),
                         [](const ::testing::TestParamInfo<Edit>& info) {
                           switch (info.param) {
                             case Edit::kNotes: return "Notes";
                             case Edit::kSpec: return "EnvironmentSpec";
                             case Edit::kDeleted: return "ListedFileDeleted";
                             case Edit::kAdded: return "FileAdded";
                           }
                           return "Unknown";
                         });

// --accept-edits (capsulefs -o accept_edits) takes the edits first, as capsule accept does:
// each command then goes on, names the file on standard error, and the journal holds one
// edits_accepted event per accept; a capsule trusted as it is records none.
TEST_F(TamperTest, AcceptEditsTakesTheEditsFirstAndRecordsThem) {
  auto accepted_events = [&](const std::string& dir) {
    RunResult log = RunCapsule({"log", dir, "--json"});
    EXPECT_EQ(log.exit_code, 0) << log.err;
    return Count(log.out, R"("type":"edits_accepted")");
  };
  std::string path = Tamper(Edit::kNotes);
  RunResult mounted = RunProgram("./capsulefs", {"-o", "accept_edits", dir_, mnt_});
  ASSERT_EQ(mounted.exit_code, 0) << mounted.err;
  ASSERT_TRUE(IsMounted(mnt_));
  testing::UnmountPath(mnt_);
  ASSERT_TRUE(WaitForDriverToExit(dir_).ok());
  EXPECT_TRUE(Contains(mounted.err, "capsulefs: -o accept_edits: " + path + ": ")) << mounted.err;
  EXPECT_TRUE(Contains(mounted.err, "accepted 1 edit (journal: edits_accepted)")) << mounted.err;
  EXPECT_EQ(accepted_events(dir_), 1u);
  ExpectVerifies();
  // Trusted as it is: mounted as without the option, nothing recorded.
  RunResult again = RunProgram("./capsulefs", {"-o", "accept_edits", dir_, mnt_});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  if (IsMounted(mnt_)) {
    testing::UnmountPath(mnt_);
    ASSERT_TRUE(WaitForDriverToExit(dir_).ok());
  }
  EXPECT_FALSE(Contains(again.err, "accept")) << again.err;
  EXPECT_EQ(accepted_events(dir_), 1u);

  path = Tamper(Edit::kSpec);
  const std::string stream = root_ + "/out.stream";
  RunResult packed = RunCapsule({"stream", "pack", dir_, "--phase", "copy", "--accept-edits", "-o", stream});
  ASSERT_EQ(packed.exit_code, 0) << packed.err;
  EXPECT_TRUE(Contains(packed.err, "capsule: --accept-edits: " + path + ": ")) << packed.err;
  EXPECT_TRUE(PathExists(stream));
  EXPECT_EQ(accepted_events(dir_), 2u);

  path = Tamper(Edit::kAdded);
  RunResult ran = RunCapsule({"exec", "--no-sandbox", "--accept-edits", dir_, "--", "true"});
  ASSERT_EQ(ran.exit_code, 0) << ran.err;
  EXPECT_TRUE(Contains(ran.err, "capsule: --accept-edits: " + path + ": ")) << ran.err;
  EXPECT_EQ(accepted_events(dir_), 3u);
  ExpectVerifies();

  path = Tamper(Edit::kNotes);
  const std::string pki = root_ + "/pki", seal = root_ + "/seal.key", target_root = root_ + "/b";
  ASSERT_TRUE(testing::MakeMoveKeys(pki, seal));
  Sidecar target(target_root, pki, seal);
  RunResult moved = RunCapsule({"move", dir_, "--to", target.address(), "--cert", pki + "/client.pem", "--key",
                                pki + "/client.key", "--ca", pki + "/ca.pem", "--accept-edits"});
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_TRUE(Contains(moved.err, "capsule: --accept-edits: " + path + ": ")) << moved.err;
  // The history travelled with the agent: four accepts, each once.
  EXPECT_EQ(accepted_events(target_root + "/agent-1"), 4u);
  RunResult verify = RunCapsule({"verify", target_root + "/agent-1"});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A sidecar does not start serving a root that holds an agent edited behind its manifest; it
// names the agent and the file. Once accepted, it starts.
TEST_F(TamperTest, ServeRefusesToStartOverATamperedAgentItHolds) {
  const std::string path = Tamper(Edit::kNotes);
  const std::string pki = root_ + "/pki", seal = root_ + "/seal.key";
  ASSERT_TRUE(testing::MakeMoveKeys(pki, seal));
  // Bounded: a sidecar that starts serves until stopped (exit 124 from timeout).
  RunResult served = RunProgram("timeout", {"20", "./capsule", "serve", "--root", root_ + "/a", "--listen",
                                            "127.0.0.1:0", "--cert", pki + "/server.pem", "--key",
                                            pki + "/server.key", "--ca", pki + "/ca.pem", "--seal-key", seal});
  ExpectRefusedNaming(served, path, "capsule serve");
  EXPECT_EQ(served.exit_code, 1) << served.err;
  EXPECT_TRUE(Contains(served.err, "agent agent-1: ")) << served.err;
  ASSERT_EQ(RunCapsule({"accept", dir_}).exit_code, 0);
  Sidecar sidecar(root_ + "/a", pki, seal);
  EXPECT_FALSE(sidecar.address().empty()) << "serving once the edit is accepted";
}

// A blob is checked by its name as it is read: the mount (which does not read blobs to start)
// answers EIO for the file whose blob lies, exec's command cannot read it, a pack fails naming
// the blob; the other files are served as before.
TEST_F(TamperTest, ABlobAlteredAtRestIsNeitherServedNorPacked) {
  const std::string blob = dir_ + "/" + BlobPath(Sha256Hex("# sample\n"));
  ASSERT_TRUE(PathExists(blob));
  ASSERT_EQ(Put(blob, "# SAMPLE\n"), 0);  // same size, other bytes
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    std::string text;
    EXPECT_EQ(ReadErrno(mnt_ + "/files/README.md", &text), EIO);
    EXPECT_EQ(text, "");
    text.clear();
    EXPECT_EQ(ReadErrno(mnt_ + "/files/src/main.py", &text), 0);
    EXPECT_EQ(text, "print('hi')\n");
    EXPECT_EQ(mount.Unmount(), 0);
  }
  RunResult exec = RunCapsule({"exec", "--no-sandbox", dir_, "--", "cat", "README.md"});
  EXPECT_NE(exec.exit_code, 0);
  EXPECT_FALSE(Contains(exec.out, "SAMPLE")) << exec.out;
  RunResult packed = Pack(dir_, root_ + "/out.stream");
  EXPECT_NE(packed.exit_code, 0);
  EXPECT_TRUE(Contains(packed.err, blob + ": does not hash to the digest it is sent under")) << packed.err;
  EXPECT_FALSE(PathExists(root_ + "/out.stream"));
}

TEST_F(TamperTest, ABlobAlteredUnderARunningMountIsNeitherServedNorPacked) {
  Mount mount(dir_, mnt_);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(mnt_ + "/files/new.txt", "written through the mount\n"), 0);
  const std::string blob = dir_ + "/" + BlobPath(Sha256Hex("print('hi')\n"));
  ASSERT_TRUE(PathExists(blob));
  ASSERT_EQ(Put(blob, "import os\n__"), 0);
  std::string text;
  EXPECT_EQ(ReadErrno(mnt_ + "/files/src/main.py", &text), EIO);
  EXPECT_EQ(text, "");
  text.clear();
  EXPECT_EQ(ReadErrno(mnt_ + "/files/new.txt", &text), 0);
  EXPECT_EQ(text, "written through the mount\n");
  // Appending copies the file first: its altered blob is not carried into a new one either.
  EXPECT_EQ(Put(mnt_ + "/files/src/main.py", "more\n", O_WRONLY | O_APPEND), EIO);
  RunResult packed = Pack(mnt_, root_ + "/out.stream");
  EXPECT_NE(packed.exit_code, 0);
  EXPECT_TRUE(Contains(packed.err, blob + ": does not hash to the digest it is sent under")) << packed.err;
  EXPECT_EQ(mount.Unmount(), 0);
}

// What a crashed mount leaves (files written since its last checkpoint, a change log) is its
// own: the next mount recovers it. An edit made behind the manifest after the crash is not.
TEST_F(TamperTest, AMountKilledWithSigkillRemountsWithoutBeingCalledTampered) {
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up());
    ASSERT_EQ(Put(mnt_ + "/" + kWorkingMemoryPath, "# notes\nwritten before the crash\n"), 0);
    ASSERT_EQ(Put(mnt_ + "/files/after.txt", "kept\n"), 0);
    mount.Kill();
  }
  // The crash left the notes newer than the manifest: what a tamper check must tell apart.
  RunResult stale = RunCapsule({"verify", dir_});
  ASSERT_NE(stale.exit_code, 0);
  ASSERT_TRUE(Contains(stale.out, std::string(kWorkingMemoryPath) + ": ")) << stale.out;
  {
    Mount mount(dir_, mnt_);
    ASSERT_TRUE(mount.up()) << "a crashed mount's own writes are not tampering";
    std::string text;
    EXPECT_EQ(ReadErrno(mnt_ + "/" + kWorkingMemoryPath, &text), 0);
    EXPECT_EQ(text, "# notes\nwritten before the crash\n");
    text.clear();
    EXPECT_EQ(ReadErrno(mnt_ + "/files/after.txt", &text), 0);
    EXPECT_EQ(text, "kept\n");
    ASSERT_EQ(Put(mnt_ + "/" + kWorkingMemoryPath, "# notes\nsecond crash\n"), 0);
    mount.Kill();
  }
  // After a crash, an edit made outside any mount is still refused, and only it is named.
  Tamper(Edit::kSpec);
  RunResult refused = MountOnce();
  ExpectRefusedNaming(refused, kEnvironmentSpecPath, "capsulefs after a crash");
  EXPECT_FALSE(Contains(refused.err, kWorkingMemoryPath)) << refused.err;
  ASSERT_EQ(RunCapsule({"accept", dir_}).exit_code, 0);
  RunResult remounted = MountOnce();
  EXPECT_EQ(remounted.exit_code, 0) << remounted.err;
  ExpectVerifies();
}

}  // namespace
}  // namespace capsule
