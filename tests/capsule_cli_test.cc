// End-to-end tests of `capsule init`, `verify`, `export`, `import` and `keygen` through the
// real binary: what a user sees, exit codes included.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <functional>

#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/format/manifest.h"
#include "tests/cli_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Shell;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

class CapsuleCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("cli");
    std::string ws = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/main.py", "print('hi')\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws + "/src/copy.py", "print('hi')\n").ok());  // same content: one blob
    cap_ = root_ + "/cap";
    auto r = RunCapsule({"init", cap_, "--id", "agent-7", "--name", "Sample", "--workspace", ws});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }

  std::string ManifestPathOfBlob() {
    auto listing = ListTree(cap_ + "/artifacts/blobs");
    return "artifacts/blobs/" + (*listing)[0].path;
  }

  std::string root_, cap_;
};

TEST_F(CapsuleCliTest, InitFromWorkspaceVerifies) {
  auto r = RunCapsule({"verify", cap_});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  // 5 layout files + 2 blobs (the two identical files share one).
  EXPECT_EQ(r.out, "ok: 7 files\n");
  auto snapshot = ReadFile(cap_ + "/artifacts/snapshot.json");
  EXPECT_TRUE(Contains(*snapshot, "\"src/main.py\""));
  EXPECT_TRUE(Contains(*snapshot, "\"src\":{\"mode\""));
}

// A workspace brought in by init keeps what a file system holds: hard links as one link group
// stored once, FIFOs, sockets and devices as metadata, and the source's modification times
// (local: .capsule/times.json, which the mount shows).
TEST_F(CapsuleCliTest, InitKeepsHardLinksSpecialFilesAndTimes) {
  std::string ws = root_ + "/ws2";
  ASSERT_TRUE(MakeDirectories(ws + "/sub").ok());
  ASSERT_TRUE(WriteFileAtomic(ws + "/one", "same inode\n").ok());
  ASSERT_EQ(::link((ws + "/one").c_str(), (ws + "/sub/two").c_str()), 0);
  ASSERT_EQ(::mkfifo((ws + "/pipe").c_str(), 0600), 0);
  struct timespec past[2] = {{1262304000, 5}, {1262304000, 5}};  // 2010-01-01
  ASSERT_EQ(::utimensat(AT_FDCWD, (ws + "/one").c_str(), past, 0), 0);
  std::string cap = root_ + "/cap2";
  auto init = RunCapsule({"init", cap, "--id", "agent-9", "--name", "Links", "--workspace", ws});
  ASSERT_EQ(init.exit_code, 0) << init.err;
  auto verify = RunCapsule({"verify", cap});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  std::string snapshot = *ReadFile(cap + "/artifacts/snapshot.json");
  EXPECT_TRUE(Contains(snapshot, "\"one\":{\"link\":1,")) << snapshot;
  EXPECT_TRUE(Contains(snapshot, "\"sub/two\":{\"link\":1,")) << snapshot;
  EXPECT_TRUE(Contains(snapshot, "\"pipe\":{\"mode\":384,\"type\":\"fifo\"}")) << snapshot;
  std::string times = *ReadFile(cap + "/.capsule/times.json");
  EXPECT_TRUE(Contains(times, "\"one\":[1262304000,5]")) << times;
}

TEST_F(CapsuleCliTest, InitRefusesNonEmptyFolderAndBadId) {
  auto again = RunCapsule({"init", cap_, "--id", "a", "--name", "b"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(Contains(again.err, "capsule: " + cap_ + ": is not empty")) << again.err;
  auto bad_id = RunCapsule({"init", root_ + "/x", "--id", "../evil", "--name", "b"});
  EXPECT_EQ(bad_id.exit_code, 1);
  EXPECT_TRUE(Contains(bad_id.err, "agent id")) << bad_id.err;
  EXPECT_FALSE(PathExists(root_ + "/x"));
  auto usage = RunCapsule({"init", root_ + "/y"});
  EXPECT_EQ(usage.exit_code, 2);
}

// A capsule made inside its own workspace (capsule init ./.agent --workspace .) never
// captures itself: neither its temporary folder nor its final one is in its snapshot.
TEST_F(CapsuleCliTest, InitInsideItsOwnWorkspaceNeverCapturesItself) {
  std::string project = root_ + "/project";
  ASSERT_TRUE(MakeDirectories(project).ok());
  ASSERT_TRUE(WriteFileAtomic(project + "/main.c", "int main(void) { return 0; }\n").ok());
  auto r = RunCapsule({"init", project + "/.agent", "--id", "agent-8", "--name", "Inside", "--workspace", project});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::string snapshot = *ReadFile(project + "/.agent/artifacts/snapshot.json");
  EXPECT_TRUE(Contains(snapshot, "\"main.c\"")) << snapshot;
  EXPECT_FALSE(Contains(snapshot, ".agent")) << snapshot;
  EXPECT_FALSE(Contains(snapshot, ".tmp-")) << snapshot;
  EXPECT_EQ(RunCapsule({"verify", project + "/.agent"}).exit_code, 0);
}

// Events name an attachment by its digest: one whose bytes were swapped (the manifest made
// to agree) would render other bytes than the event names, and verify says so; so does a
// file there not named by a digest. One created and not yet written (empty) has no content.
TEST_F(CapsuleCliTest, VerifyChecksEveryAttachmentAgainstItsName) {
  ASSERT_TRUE(WriteFileAtomic(root_ + "/note.txt", "the real note\n").ok());
  auto attached = RunCapsule({"attach", cap_, root_ + "/note.txt"});
  ASSERT_EQ(attached.exit_code, 0) << attached.err;
  const std::string name = "memory/attachments/" + Sha256Hex("the real note\n");
  ASSERT_TRUE(PathExists(cap_ + "/" + name));
  auto clean = RunCapsule({"verify", cap_});
  EXPECT_EQ(clean.exit_code, 0) << clean.out << clean.err;

  const std::string forged = "another note\n";
  const std::string stray = "memory/attachments/notes.txt";
  const std::string empty = "memory/attachments/" + Sha256Hex("not written yet");
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/" + name, forged).ok());
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/" + stray, "x").ok());
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/" + empty, "").ok());
  Result<Manifest> manifest = Manifest::Load(cap_);
  ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
  manifest->files[name] = FileDigest{Sha256Hex(forged), forged.size()};
  manifest->files[stray] = FileDigest{Sha256Hex("x"), 1};
  manifest->files[empty] = FileDigest{Sha256Hex(""), 0};
  ASSERT_TRUE(manifest->Save(cap_).ok());

  auto r = RunCapsule({"verify", cap_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.out, name + ": attachment digest does not match its name")) << r.out;
  EXPECT_TRUE(Contains(r.out, stray + ": not an attachment name (64 hex digits of its SHA-256)")) << r.out;
  EXPECT_FALSE(Contains(r.out, empty)) << r.out;
  EXPECT_TRUE(Contains(r.err, "does not verify (2 problems)")) << r.err;
}

TEST_F(CapsuleCliTest, VerifyNamesEveryKindOfDamage) {
  std::string blob = ManifestPathOfBlob();
  // Flip one byte of a blob, truncate the notes, add a file, remove the vector index.
  std::string blob_data = *ReadFile(cap_ + "/" + blob);
  blob_data[0] ^= 0x20;
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/" + blob, blob_data).ok());
  ASSERT_EQ(::truncate((cap_ + "/memory/working_memory.md").c_str(), 3), 0);
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/memory/stray.txt", "extra").ok());
  ASSERT_EQ(::unlink((cap_ + "/memory/vector_index/index.json").c_str()), 0);

  auto r = RunCapsule({"verify", cap_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.out, blob + ": digest mismatch")) << r.out;
  EXPECT_TRUE(Contains(r.out, blob + ": blob digest does not match its name")) << r.out;
  EXPECT_TRUE(Contains(r.out, "memory/working_memory.md: truncated (3 of 17 bytes)")) << r.out;
  EXPECT_TRUE(Contains(r.out, "memory/stray.txt: not in manifest")) << r.out;
  EXPECT_TRUE(Contains(r.out, "memory/vector_index/index.json: missing")) << r.out;
  EXPECT_TRUE(Contains(r.err, "does not verify (5 problems)")) << r.err;

  auto json = RunCapsule({"verify", cap_, "--json"});
  EXPECT_EQ(json.exit_code, 1);
  EXPECT_TRUE(Contains(json.out, "\"ok\":false")) << json.out;
}

TEST_F(CapsuleCliTest, VerifyCatchesSecretInEnvironmentSpec) {
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/environment/spec.json", R"({"env":{"OPENAI_API_KEY":"sk-123"}})").ok());
  auto r = RunCapsule({"verify", cap_});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.out, "environment/spec.json: env.OPENAI_API_KEY: carries a secret value")) << r.out;
}

TEST_F(CapsuleCliTest, ExportIsDeterministicAndReadableByGnuTarAndBsdtar) {
  auto a = RunCapsule({"export", cap_, "-o", root_ + "/a.tar"});
  ASSERT_EQ(a.exit_code, 0) << a.err;
  // A copy of the same state, made separately, exports to the same bytes.
  ASSERT_EQ(Shell("cp -a " + cap_ + " " + root_ + "/copy"), 0);
  ASSERT_EQ(RunCapsule({"export", root_ + "/copy", "-o", root_ + "/b.tar"}).exit_code, 0);
  EXPECT_EQ(*ReadFile(root_ + "/a.tar"), *ReadFile(root_ + "/b.tar"));

  auto gnu = testing::RunProgram("tar", {"-tf", root_ + "/a.tar"});
  EXPECT_EQ(gnu.exit_code, 0);
  EXPECT_TRUE(gnu.out.rfind("manifest.json\n", 0) == 0) << gnu.out;  // the manifest comes first
  EXPECT_FALSE(Contains(gnu.out, ".capsule"));
  auto bsd = testing::RunProgram("bsdtar", {"-xf", root_ + "/a.tar", "-C", MakeTempDir("bsd")});
  EXPECT_EQ(bsd.exit_code, 0) << bsd.err;
  EXPECT_EQ(RunCapsule({"verify", root_ + "/a.tar"}).out, "ok: 7 files\n");
}

// -o - is standard output; a FIFO or a device is written in place, never renamed over; a
// symbolic link, a directory and a path inside the capsule are refused and left as they were.
TEST_F(CapsuleCliTest, ExportWritesToStandardOutputAFifoOrADeviceAndRefusesLinksAndItsOwnFolder) {
  std::string file = root_ + "/file.tar";
  ASSERT_EQ(RunCapsule({"export", cap_, "-o", file}).exit_code, 0);
  std::string expected = *ReadFile(file);

  auto piped = RunCapsule({"export", cap_, "-o", "-"});
  EXPECT_EQ(piped.exit_code, 0) << piped.err;
  EXPECT_EQ(piped.out, expected);
  EXPECT_TRUE(Contains(piped.err, "exported " + cap_ + " to standard output")) << piped.err;

  std::string fifo = root_ + "/fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  ASSERT_EQ(Shell("cat " + fifo + " > " + root_ + "/from-fifo.tar & ./capsule export " + cap_ + " -o " + fifo +
                  " >/dev/null && wait"),
            0);
  EXPECT_EQ(*ReadFile(root_ + "/from-fifo.tar"), expected);
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode)) << "the FIFO must be written in place, not replaced";
  EXPECT_EQ(RunCapsule({"export", cap_, "-o", "/dev/null"}).exit_code, 0);
  ASSERT_EQ(::stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));

  std::string link = root_ + "/link.tar";
  ASSERT_EQ(::symlink(file.c_str(), link.c_str()), 0);
  auto through_link = RunCapsule({"export", cap_, "-o", link});
  EXPECT_EQ(through_link.exit_code, 1);
  EXPECT_TRUE(Contains(through_link.err, link + ": is a symbolic link")) << through_link.err;
  ASSERT_EQ(::lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  auto into_dir = RunCapsule({"export", cap_, "-o", root_});
  EXPECT_EQ(into_dir.exit_code, 1);
  EXPECT_TRUE(Contains(into_dir.err, "is a directory")) << into_dir.err;

  auto inside = RunCapsule({"export", cap_, "-o", cap_ + "/memory/self.tar"});
  EXPECT_EQ(inside.exit_code, 1);
  EXPECT_TRUE(Contains(inside.err, "is inside the capsule")) << inside.err;
  EXPECT_FALSE(PathExists(cap_ + "/memory/self.tar"));
  EXPECT_EQ(RunCapsule({"verify", cap_}).exit_code, 0);

  // stream pack takes - too.
  auto packed = RunCapsule({"stream", "pack", cap_, "--phase", "copy", "-o", "-"});
  EXPECT_EQ(packed.exit_code, 0) << packed.err;
  EXPECT_TRUE(Contains(packed.out, "lnk-move-4.json"));
  EXPECT_TRUE(Contains(packed.out, "lnk-move-4.end"));
}

// Deleted content that lingers (a blob no file names) is reported by verify as such, and
// capsule gc removes it from the manifest and the disk; a mounted capsule is left to its mount.
TEST_F(CapsuleCliTest, VerifyReportsUnreferencedBlobsAndGcRemovesThem) {
  std::string stray = "artifacts/blobs/" + Sha256Hex("deleted long ago");
  ASSERT_TRUE(WriteFileAtomic(cap_ + "/" + stray, "deleted long ago").ok());
  auto found = RunCapsule({"verify", cap_});
  EXPECT_EQ(found.exit_code, 1);
  EXPECT_TRUE(Contains(found.out, stray + ": unreferenced blob: no file of the snapshot names it (capsule gc removes it)"))
      << found.out;
  auto gc = RunCapsule({"gc", cap_});
  EXPECT_EQ(gc.exit_code, 0) << gc.err;
  EXPECT_TRUE(Contains(gc.out, "removed 1 unreferenced blob")) << gc.out;
  EXPECT_FALSE(PathExists(cap_ + "/" + stray));
  auto clean = RunCapsule({"verify", cap_});
  EXPECT_EQ(clean.exit_code, 0) << clean.out;
  EXPECT_EQ(RunCapsule({"gc", cap_}).out, "removed 0 unreferenced blobs (0 bytes) from " + cap_ + "\n");
  // Not held here: refused like every change.
  ASSERT_EQ(::unlink((cap_ + "/.capsule/holder.json").c_str()), 0);
  EXPECT_EQ(RunCapsule({"gc", cap_}).exit_code, 1);
}

TEST_F(CapsuleCliTest, ExportRefusesDamagedCapsuleAndWritesNothing) {
  ASSERT_EQ(::truncate((cap_ + "/memory/working_memory.md").c_str(), 1), 0);
  auto r = RunCapsule({"export", cap_, "-o", root_ + "/bad.tar"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(Contains(r.err, "memory/working_memory.md")) << r.err;
  EXPECT_FALSE(PathExists(root_ + "/bad.tar"));
  for (const TreeEntry& e : *ListTree(root_)) EXPECT_EQ(e.path.find(".tmp-"), std::string::npos) << e.path;
}

TEST_F(CapsuleCliTest, SignedExportVerifiesAndTamperingIsCaught) {
  auto key = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/sign.key"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  ASSERT_EQ(key.out.size(), 65u);  // 64 hex digits and a newline
  struct stat st;
  ASSERT_EQ(::stat((root_ + "/sign.key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_TRUE(WriteFileAtomic(root_ + "/sign.pub", key.out).ok());
  auto other = RunCapsule({"keygen", "--type", "ed25519", "-o", root_ + "/other.key"});
  ASSERT_TRUE(WriteFileAtomic(root_ + "/other.pub", other.out).ok());

  ASSERT_EQ(RunCapsule({"export", cap_, "-o", root_ + "/s.tar", "--sign", root_ + "/sign.key"}).exit_code, 0);
  auto good = RunCapsule({"verify", root_ + "/s.tar", "--pubkey", root_ + "/sign.pub"});
  EXPECT_EQ(good.exit_code, 0) << good.out << good.err;
  EXPECT_TRUE(Contains(good.out, "signature: good, made by " + key.out.substr(0, 64))) << good.out;

  auto wrong_key = RunCapsule({"verify", root_ + "/s.tar", "--pubkey", root_ + "/other.pub"});
  EXPECT_EQ(wrong_key.exit_code, 1);
  EXPECT_TRUE(Contains(wrong_key.out, "signature.json: signature does not verify")) << wrong_key.out;

  // Tamper with the signed manifest inside the tar: change the agent's name, same length,
  // and fix the tar header checksum so that only the signature can tell.
  std::string tar = *ReadFile(root_ + "/s.tar");
  size_t at = tar.find("\"name\":\"Sample\"");
  ASSERT_NE(at, std::string::npos);
  tar.replace(at, 15, "\"name\":\"Evil!!\"");
  ASSERT_TRUE(WriteFileAtomic(root_ + "/t.tar", tar).ok());
  auto tampered = RunCapsule({"verify", root_ + "/t.tar", "--pubkey", root_ + "/sign.pub"});
  EXPECT_EQ(tampered.exit_code, 1);
  EXPECT_TRUE(Contains(tampered.out, "signature.json: signature does not verify")) << tampered.out;

  auto unsigned_export = RunCapsule({"export", cap_, "-o", root_ + "/u.tar"});
  auto no_sig = RunCapsule({"verify", root_ + "/u.tar", "--pubkey", root_ + "/sign.pub"});
  EXPECT_EQ(no_sig.exit_code, 1);
  EXPECT_TRUE(Contains(no_sig.out, "signature.json: missing")) << no_sig.out;
}

TEST_F(CapsuleCliTest, ImportPlacesVerifiedCapsuleReadOnlyUnlessAdopted) {
  ASSERT_EQ(RunCapsule({"export", cap_, "-o", root_ + "/a.tar"}).exit_code, 0);
  auto r = RunCapsule({"import", root_ + "/a.tar", root_ + "/imported"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(RunCapsule({"verify", root_ + "/imported"}).exit_code, 0);
  EXPECT_TRUE(Contains(*ReadFile(root_ + "/imported/.capsule/holder.json"), "\"state\":\"retired\""));
  EXPECT_TRUE(Contains(*ReadFile(root_ + "/imported/.capsule/holder.json"), "\"epoch\":1"));

  auto adopted = RunCapsule({"import", root_ + "/a.tar", root_ + "/adopted", "--adopt"});
  ASSERT_EQ(adopted.exit_code, 0) << adopted.err;
  std::string holder = *ReadFile(root_ + "/adopted/.capsule/holder.json");
  EXPECT_TRUE(Contains(holder, "\"epoch\":2")) << holder;
  EXPECT_TRUE(Contains(holder, "\"state\":\"active\"")) << holder;
  EXPECT_TRUE(Contains(*ReadFile(root_ + "/adopted/manifest.json"), "\"epoch\":2"));
  EXPECT_EQ(RunCapsule({"verify", root_ + "/adopted"}).exit_code, 0);
}

// Rewrites a valid export with `inject` called before the end, to make unsafe variants.
std::string RewriteTar(const std::string& tar, const std::function<void(TarWriter&)>& inject) {
  StringSource source(tar);
  TarReader reader(&source);
  StringSink sink;
  TarWriter writer(&sink);
  TarEntry entry;
  while (*reader.Next(&entry)) {
    if (entry.type == TarEntry::Type::kDirectory) {
      EXPECT_TRUE(writer.AddDirectory(entry.path).ok());
      continue;
    }
    std::string data(entry.size, '\0');
    EXPECT_EQ(*reader.ReadData(data.data(), data.size()), data.size());
    EXPECT_TRUE(writer.AddFile(entry.path, data).ok());
  }
  inject(writer);
  EXPECT_TRUE(writer.Finish().ok());
  return sink.data();
}

// Changes the type flag of the header of `path` and fixes the header checksum.
std::string PatchType(std::string tar, const std::string& path, char flag) {
  size_t at = tar.find(path + std::string(1, '\0'));
  EXPECT_EQ(at % 512, 0u);
  tar[at + 156] = flag;
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(tar[at + i]);
  std::snprintf(&tar[at + 148], 8, "%06o", sum);
  tar[at + 155] = ' ';
  return tar;
}

TEST_F(CapsuleCliTest, ImportRefusesEveryUnsafeTarAndPlacesNothing) {
  ASSERT_EQ(RunCapsule({"export", cap_, "-o", root_ + "/a.tar"}).exit_code, 0);
  std::string good = *ReadFile(root_ + "/a.tar");
  struct Case {
    std::string name;
    std::string tar;
    std::string expect;
  };
  std::vector<Case> cases = {
      {"absolute", RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("/etc/evil", "x"); }), "absolute path"},
      {"dotdot", RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/../../evil", "x"); }), "unsafe path"},
      {"link_out", RewriteTar(good, [](TarWriter& w) { (void)w.AddSymlink("memory/l", "../../etc/passwd"); }),
       "a capsule's folder holds no links"},
      {"duplicate", RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/working_memory.md", "again"); }),
       "duplicate entry"},
      {"device", PatchType(RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/dev", ""); }), "memory/dev", '3'),
       "character device refused"},
      {"fifo", PatchType(RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/fifo", ""); }), "memory/fifo", '6'),
       "FIFO refused"},
      {"hardlink", PatchType(RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/hl", ""); }), "memory/hl", '1'),
       "hard link"},
      {"local_dir", RewriteTar(good, [](TarWriter& w) { (void)w.AddFile(".capsule/holder.json", "{}"); }), ".capsule/"},
      {"cut_short", good.substr(0, 1536 + 100), "cut short"},
      {"damaged", RewriteTar(good, [](TarWriter& w) { (void)w.AddFile("memory/extra", "x"); }), "not in manifest"},
  };
  for (const Case& c : cases) {
    std::string tar_path = root_ + "/" + c.name + ".tar";
    ASSERT_TRUE(WriteFileAtomic(tar_path, c.tar).ok());
    std::string dest = root_ + "/dest-" + c.name;
    auto r = RunCapsule({"import", tar_path, dest});
    EXPECT_EQ(r.exit_code, 1) << c.name;
    EXPECT_TRUE(Contains(r.err, c.expect)) << c.name << ": " << r.err;
    EXPECT_FALSE(PathExists(dest)) << c.name;
  }
  // Nothing placed anywhere: no destination, no staging debris, nothing outside.
  auto listing = ListTree(root_);
  for (const TreeEntry& e : *listing) {
    EXPECT_EQ(e.path.find(".tmp-"), std::string::npos) << e.path;
    EXPECT_EQ(e.path.find("evil"), std::string::npos) << e.path;
  }
}

TEST_F(CapsuleCliTest, KeygenRefusesToOverwriteAndPrintsVersion) {
  ASSERT_EQ(RunCapsule({"keygen", "--type", "x25519", "-o", root_ + "/k"}).exit_code, 0);
  auto again = RunCapsule({"keygen", "--type", "x25519", "-o", root_ + "/k"});
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_TRUE(Contains(again.err, "never overwritten"));
  EXPECT_EQ(RunCapsule({"keygen", "--type", "rsa", "-o", root_ + "/r"}).exit_code, 2);
  auto version = RunCapsule({"--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_TRUE(Contains(version.out, "capsule "));
}

}  // namespace
}  // namespace capsule
