// The Move Stream's edges through the real binary: a FIFO of the workspace travels in the
// stream manifest and arrives as a FIFO, while a FIFO as a tar entry is refused whatever sent
// it; ids a stream or a command names are checked; a capsule whose environment spec holds a
// secret value is never packed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>

#include "capsule/base/byte_stream.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/format/workspace.h"
#include "tests/cli_runner.h"
#include "tests/fake_target_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunResult;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// The entries of a tar, each copied as it is (pax records too), with `inject` called just
// before the entry named `before`.
std::string RewriteStream(const std::string& tar, const std::string& before,
                          const std::function<void(TarWriter&)>& inject) {
  StringSource source(tar);
  TarReader reader(&source);
  StringSink sink;
  TarWriter writer(&sink);
  TarEntry entry;
  while (*reader.Next(&entry)) {
    if (entry.path == before) inject(writer);
    switch (entry.type) {
      case TarEntry::Type::kDirectory:
        EXPECT_TRUE(writer.AddDirectory(entry.path, entry.mode, entry.pax).ok());
        break;
      case TarEntry::Type::kFile: {
        std::string data(entry.size, '\0');
        if (entry.size > 0) {
          EXPECT_EQ(*reader.ReadData(data.data(), data.size()), data.size());
        }
        EXPECT_TRUE(writer.AddFile(entry.path, data, entry.mode, entry.pax).ok());
        break;
      }
      default:
        ADD_FAILURE() << "unexpected entry " << entry.path;
    }
  }
  EXPECT_TRUE(writer.Finish().ok());
  return sink.data();
}

class StreamEdgesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("stream-edges");
    ws_ = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws_ + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/README.md", "# sample\n").ok());
    src_ = root_ + "/src";
    dst_ = root_ + "/dst";
  }

  void Init() {
    RunResult r = RunCapsule({"init", src_, "--id", "agent-7", "--name", "Sample", "--workspace", ws_});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::string root_, ws_, src_, dst_;
};

// A FIFO of the workspace: no tar entry of that type leaves the sender, the manifest names it,
// and the receiver's snapshot holds it as a FIFO with its mode.
TEST_F(StreamEdgesTest, FifoTravelsInTheManifestAndArrivesAsFifo) {
  ASSERT_EQ(::mkfifo((ws_ + "/src/pipe").c_str(), 0640), 0);
  Init();
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "copy", "-o", root_ + "/copy.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  std::string stream = *ReadFile(root_ + "/copy.tar");
  StringSource source(stream);
  TarReader reader(&source);
  TarEntry entry;
  std::string manifest;
  while (*reader.Next(&entry)) {
    EXPECT_NE(entry.type, TarEntry::Type::kFifo) << entry.path;
    EXPECT_NE(entry.path, "files/src/pipe");
    if (entry.path == "lnk-move-4.json") {
      manifest.resize(entry.size);
      ASSERT_EQ(*reader.ReadData(manifest.data(), manifest.size()), manifest.size());
    }
  }
  EXPECT_TRUE(Contains(manifest, "\"special\":{\"files/src/pipe\":{\"mode\":416,\"type\":\"fifo\"}}")) << manifest;

  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/copy.tar", dst_});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  Snapshot arrived = *Snapshot::Load(dst_);
  ASSERT_NE(arrived.Find("src/pipe"), nullptr);
  EXPECT_EQ(arrived.Find("src/pipe")->type, SnapshotEntry::Type::kFifo);
  EXPECT_EQ(arrived.Find("src/pipe")->mode, 0640u);
  RunResult verify = RunCapsule({"verify", dst_});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
}

// A FIFO as a tar entry under files/, in a stream otherwise as our sender writes it: refused
// whole, naming the entry, and the destination left absent.
TEST_F(StreamEdgesTest, FifoAsTarEntryIsRefusedNamingIt) {
  Init();
  RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", "copy", "-o", root_ + "/copy.tar"});
  ASSERT_EQ(pack.exit_code, 0) << pack.err;
  for (TarEntry::Type type : {TarEntry::Type::kFifo, TarEntry::Type::kCharDevice}) {
    std::string forged = RewriteStream(*ReadFile(root_ + "/copy.tar"), "lnk-move-4.end", [type](TarWriter& w) {
      TarEntry special;
      special.path = "files/pipe";
      special.type = type;
      special.dev_major = 1;
      special.dev_minor = 3;
      ASSERT_TRUE(w.AddSpecial(special).ok());
    });
    ASSERT_TRUE(WriteFileAtomic(root_ + "/forged.tar", forged).ok());
    RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/forged.tar", dst_});
    EXPECT_EQ(unpack.exit_code, 1) << unpack.out;
    const std::string name = type == TarEntry::Type::kFifo ? "FIFO" : "character device";
    EXPECT_TRUE(Contains(unpack.err, "stream entry 'files/pipe': a " + name +
                                         " as a tar entry (format 4's tar holds only files, folders, links and hard "
                                         "links"))
        << unpack.err;
    EXPECT_FALSE(PathExists(dst_));
  }
  // The same stream unforged arrives: the refusal is the entry's.
  RunResult unpack = RunCapsule({"stream", "unpack", root_ + "/copy.tar", dst_});
  EXPECT_EQ(unpack.exit_code, 0) << unpack.err;
}

// A capsule whose environment spec carries a secret value (taken in by capsule accept, which
// records edits as they are): neither packed into a stream, nor exported, nor moved; names
// the code refuses beyond the obvious ones (APIKEY, MY_TOKENS) included.
TEST_F(StreamEdgesTest, SecretInTheSpecIsNeverWrittenOut) {
  Init();
  ASSERT_TRUE(testing::MakeMoveKeys(root_ + "/pki", root_ + "/seal.key"));
  testing::FakeTarget target(root_ + "/pki", "refuse", R"("no")", root_ + "/fake.log");
  for (const std::string name : {"TOKEN", "APIKEY", "MY_TOKENS"}) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(WriteFileAtomic(src_ + "/environment/spec.json",
                                R"({"env":{")" + name + R"(":"abc123"},"image":"debian:12","packages":[],"secrets":[]})")
                    .ok());
    RunResult accept = RunCapsule({"accept", src_});
    ASSERT_EQ(accept.exit_code, 0) << accept.err;
    const std::string why = "environment/spec.json: env." + name + ": carries a secret value; list \"" + name +
                            "\" under \"secrets\" by name only";
    for (const char* phase : {"copy", "switch"}) {
      RunResult pack = RunCapsule({"stream", "pack", src_, "--phase", phase, "--move", std::string(32, 'a'),
                                   "--seal-to", std::string(64, '1'), "-o", root_ + "/s.tar"});
      EXPECT_EQ(pack.exit_code, 1) << phase;
      EXPECT_TRUE(Contains(pack.err, why + "; a secret never leaves in a stream: nothing was sent")) << pack.err;
      EXPECT_FALSE(PathExists(root_ + "/s.tar"));
    }
    RunResult exported = RunCapsule({"export", src_, "-o", root_ + "/e.tar"});
    EXPECT_EQ(exported.exit_code, 1);
    EXPECT_TRUE(Contains(exported.err, why + "; a secret never leaves in an export: export refused")) << exported.err;
    EXPECT_FALSE(PathExists(root_ + "/e.tar"));
    RunResult moved = RunCapsule({"move", src_, "--to", target.address(), "--cert", root_ + "/pki/client.pem", "--key",
                                  root_ + "/pki/client.key", "--ca", root_ + "/pki/ca.pem"});
    EXPECT_EQ(moved.exit_code, 1);
    EXPECT_TRUE(Contains(moved.err, why)) << moved.err;
  }
  // Refused before anything was offered: the target never heard a call.
  EXPECT_FALSE(Contains(ReadFile(root_ + "/fake.log").ok() ? *ReadFile(root_ + "/fake.log") : "", "call "));
  // The files phase carries the workspace only, never the spec: it packs.
  RunResult files = RunCapsule({"stream", "pack", src_, "--phase", "files", "-o", root_ + "/f.tar"});
  EXPECT_EQ(files.exit_code, 0) << files.err;
}

}  // namespace
}  // namespace capsule
