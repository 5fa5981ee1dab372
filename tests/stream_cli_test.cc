// capsule stream pack, unpack and have through the real binary: a copy and its have, a sealed
// switch, and the refusals a user meets (an unsealed switch, a sealed stream without a key, a
// tampered sealed stream), each exit status 1 with the destination left as it was.
#include <gtest/gtest.h>
#include <unistd.h>

#include "capsule/base/file_io.h"
#include "capsule/format/create.h"
#include "capsule/format/manifest.h"
#include "capsule/format/workspace.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;
using testing::RunResult;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string Trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

// Every file and link under `dir` with its digest: equal listings, equal folders.
std::string Listing(const std::string& dir) {
  RunResult r = RunProgram("sh", {"-c", "cd '" + dir + "' 2>/dev/null || { echo absent; exit 0; }; "
                                        "find . -printf '%p %y %m %s %l\\n' | sort; "
                                        "find . -type f -exec sha256sum {} + | sort"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.out;
}

std::string Debris(const std::string& root) {
  return RunProgram("sh", {"-c", "find '" + root + "' -name '.tmp-*'"}).out;
}

class StreamCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("stream-cli");
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/main.py", "print('hi')\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/old.py", "print('old')\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/big.bin", std::string(300000, 'z')).ok());
    src_ = root_ + "/src";
    RunResult r = RunCapsule({"init", src_, "--id", "agent-7", "--name", "Sample", "--workspace", ws});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    dst_ = root_ + "/dst";
  }

  // The receiver's key: its public half in hex.
  std::string NewKey(const std::string& name) {
    RunResult keygen = RunCapsule({"keygen", "--type", "x25519", "-o", root_ + "/" + name});
    EXPECT_EQ(keygen.exit_code, 0) << keygen.err;
    return Trim(keygen.out);
  }

  std::string Have(const std::string& dir, const std::string& file) {
    RunResult have = RunCapsule({"stream", "have", dir});
    EXPECT_EQ(have.exit_code, 0) << have.err;
    EXPECT_TRUE(WriteFileAtomic(root_ + "/" + file, have.out).ok());
    return have.out;
  }

  // A copy of src_ received at dst_, of move `move`.
  void Copy(const std::string& move) {
    RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "copy", "--move", move, "-o", root_ + "/copy.tar"});
    ASSERT_EQ(pack.exit_code, 0) << pack.err;
    RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/copy.tar", dst_});
    ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  }

  // Changes the source's workspace through the library, as the running agent would.
  void ChangeSource(const std::string& path, const std::string& data, bool remove_old) {
    std::string local = root_ + "/put.data";
    ASSERT_TRUE(WriteFileAtomic(local, data).ok());
    ASSERT_TRUE(PutWorkspaceFile(src_, path, local).ok());
    ::unlink(local.c_str());
    if (remove_old) {
      Snapshot snapshot = *Snapshot::Load(src_);
      snapshot.Remove("src/old.py");
      ASSERT_TRUE(snapshot.Save(src_).ok());
    }
    Manifest old = *Manifest::Load(src_);
    ASSERT_TRUE(BuildManifest(src_, old.agent, old.holder_machine, old.holder_epoch)->Save(src_).ok());
  }

  void ExpectRefusedUnchanged(const std::vector<std::string>& args, const std::string& reason) {
    std::string before = Listing(dst_);
    RunResult r = RunCapsule(args);
    EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
    EXPECT_EQ(r.err.rfind("capsule: ", 0), 0u) << r.err;
    EXPECT_TRUE(Contains(r.err, reason)) << r.err;
    EXPECT_EQ(Listing(dst_), before);
    EXPECT_EQ(Debris(root_), "");
  }

  std::string root_, src_, dst_;
};

const std::string kMove = "0123456789abcdef0123456789abcdef";

TEST_F(StreamCliTest, CopyUnpacksVerifiesAndHaveSkipsWhatIsHeld) {
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "copy", "-o", root_ + "/copy.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  // 4 workspace files, notes, journal, vector index, environment spec.
  EXPECT_TRUE(Contains(pack.out, ": 8 files (")) << pack.out;
  EXPECT_TRUE(Contains(pack.out, "0 held the same by the receiver, 0 removed")) << pack.out;
  auto tar_list = RunProgram("tar", {"-tf", root_ + "/copy.tar"});
  EXPECT_EQ(tar_list.exit_code, 0) << tar_list.err;
  EXPECT_EQ(tar_list.out.rfind("lnk-move-4.json\n", 0), 0u) << tar_list.out;
  EXPECT_TRUE(Contains(tar_list.out, "files/src/main.py\n"));
  EXPECT_TRUE(tar_list.out.size() > 15 && tar_list.out.substr(tar_list.out.size() - 15) == "lnk-move-4.end\n");

  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/copy.tar", dst_});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  EXPECT_TRUE(Contains(unpack.out, "unpacked copy of move ")) << unpack.out;
  RunResult verify = RunCapsule({"verify", dst_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(*ReadWorkspaceFile(dst_, "src/main.py"), "print('hi')\n");
  EXPECT_EQ(Have(dst_, "dst.have"), Have(src_, "src.have"));
  EXPECT_TRUE(Contains(Have(dst_, "dst.have"), "\"files/big.bin\":\""));

  // Nothing changed: nothing sent.
  RunResult again = RunCapsule({"stream", "pack", src_, "--phase", "copy", "--have", root_ + "/dst.have", "-o", root_ + "/again.tar"});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_TRUE(Contains(again.out, ": 0 files (0 bytes) sent, 8 held the same")) << again.out;

  // One changed file: only it is sent.
  ChangeSource("src/main.py", "print('changed')\n", false);
  RunResult delta = RunCapsule({"stream", "pack", src_, "--phase", "copy", "--have", root_ + "/dst.have", "-o", root_ + "/delta.tar"});
  ASSERT_EQ(delta.exit_code, 0) << delta.err;
  EXPECT_TRUE(Contains(delta.out, ": 1 files (17 bytes) sent, 7 held the same")) << delta.out;
  ASSERT_EQ(RunCapsule({"stream", "unpack", root_ + "/delta.tar", dst_}).exit_code, 0);
  EXPECT_EQ(*ReadWorkspaceFile(dst_, "src/main.py"), "print('changed')\n");
  EXPECT_EQ(RunCapsule({"verify", dst_}).exit_code, 0);
}

TEST_F(StreamCliTest, SealedSwitchRemovesWhatIsGone) {
  std::string pub = NewKey("recv.key");
  Copy(kMove);
  ChangeSource("src/new.py", "print('new')\n", true);
  Have(dst_, "dst.have");
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "switch", "--move", kMove, "--have", root_ + "/dst.have",
                               "--seal-to", pub, "-o", root_ + "/switch.sealed"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  EXPECT_TRUE(Contains(pack.out, "packed switch of move " + kMove + ": 1 files")) << pack.out;
  EXPECT_TRUE(Contains(pack.out, "1 removed")) << pack.out;
  EXPECT_EQ(ReadFile(root_ + "/switch.sealed")->substr(0, 8), "LNKSEAL1");
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/switch.sealed", dst_, "--open-with", root_ + "/recv.key"});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  EXPECT_TRUE(Contains(unpack.out, "unpacked switch of move " + kMove)) << unpack.out;
  EXPECT_TRUE(Contains(unpack.out, "1 removed")) << unpack.out;
  EXPECT_EQ(RunCapsule({"verify", dst_}).exit_code, 0);
  EXPECT_FALSE(ReadWorkspaceFile(dst_, "src/old.py").ok());
  EXPECT_EQ(*ReadWorkspaceFile(dst_, "src/new.py"), "print('new')\n");
  EXPECT_EQ(Have(dst_, "a"), Have(src_, "b"));
}

TEST_F(StreamCliTest, SealedCopyRoundTrips) {
  std::string pub = NewKey("recv.key");
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "copy", "--seal-to", pub, "-o", root_ + "/copy.sealed"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/copy.sealed", dst_, "--open-with", root_ + "/recv.key"});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  EXPECT_EQ(RunCapsule({"verify", dst_}).exit_code, 0);
}

TEST_F(StreamCliTest, PackRefusesUnsealedSwitch) {
  Copy(kMove);
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "switch", "--move", kMove, "-o", root_ + "/switch.tar"});
  EXPECT_EQ(pack.exit_code, 1);
  EXPECT_TRUE(Contains(pack.err, "a switch is always sealed")) << pack.err;
  EXPECT_FALSE(PathExists(root_ + "/switch.tar"));
  // And without its copy's move id.
  std::string pub = NewKey("recv.key");
  RunResult no_move = RunCapsule({"stream", "pack", src_, "--phase", "switch", "--seal-to", pub, "-o", root_ + "/s"});
  EXPECT_EQ(no_move.exit_code, 1);
  EXPECT_TRUE(Contains(no_move.err, "--move")) << no_move.err;
  EXPECT_FALSE(PathExists(root_ + "/s"));
  EXPECT_EQ(Debris(root_), "");
}

TEST_F(StreamCliTest, UnpackRefusesSealedStreamWithoutKeyOrWithAnotherKey) {
  std::string pub = NewKey("recv.key");
  NewKey("other.key");
  Copy(kMove);
  ASSERT_EQ(RunCapsule({"stream", "pack", src_, "--phase", "switch", "--move", kMove, "--seal-to", pub, "-o",
                        root_ + "/switch.sealed"})
                .exit_code,
            0);
  ExpectRefusedUnchanged({"stream", "unpack", root_ + "/switch.sealed", dst_}, "give --key FILE");
  ExpectRefusedUnchanged({"stream", "unpack", root_ + "/switch.sealed", dst_, "--open-with", root_ + "/other.key"}, "");
}

TEST_F(StreamCliTest, UnpackRefusesTamperedSealedStream) {
  std::string pub = NewKey("recv.key");
  Copy(kMove);
  ChangeSource("src/main.py", "print('changed')\n", true);
  ASSERT_EQ(RunCapsule({"stream", "pack", src_, "--phase", "switch", "--move", kMove, "--seal-to", pub, "-o",
                        root_ + "/switch.sealed"})
                .exit_code,
            0);
  std::string sealed = *ReadFile(root_ + "/switch.sealed");
  for (size_t at : {size_t{9}, size_t{100}, sealed.size() / 2, sealed.size() - 20, sealed.size() - 1}) {
    SCOPED_TRACE(at);
    std::string tampered = sealed;
    tampered[at] ^= 0x01;
    ASSERT_TRUE(WriteFileAtomic(root_ + "/tampered", tampered).ok());
    ExpectRefusedUnchanged({"stream", "unpack", root_ + "/tampered", dst_, "--open-with", root_ + "/recv.key"}, "");
  }
  ASSERT_TRUE(WriteFileAtomic(root_ + "/cut", sealed.substr(0, sealed.size() - 17)).ok());
  ExpectRefusedUnchanged({"stream", "unpack", root_ + "/cut", dst_, "--open-with", root_ + "/recv.key"}, "");
  EXPECT_EQ(*ReadWorkspaceFile(dst_, "src/main.py"), "print('hi')\n");
}

TEST_F(StreamCliTest, UnpackRefusesCapsuleThisMachineHolds) {
  Copy(kMove);
  std::string before = Listing(src_);
  RunResult r = RunCapsule({"stream", "unpack", root_ + "/copy.tar", src_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "this machine holds the agent")) << r.err;
  EXPECT_EQ(Listing(src_), before);
  EXPECT_EQ(Debris(root_), "");
}

}  // namespace
}  // namespace capsule
