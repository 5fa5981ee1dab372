// The Move Stream at the library level: round trips, have and removed, the journal rule, and
// every refusal, each checking that nothing was placed. Refused streams are forged with
// TarWriter directly, so that they exercise the reader and not the writer.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <functional>

#include "capsule/base/file_io.h"
#include "capsule/base/scoped_limit.h"
#include "capsule/base/sha256.h"
#include "capsule/base/tar.h"
#include "capsule/base/temp_dir.h"
#include "capsule/format/copy.h"
#include "capsule/format/create.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "journal/journal.h"
#include "move/stream/digest_check.h"
#include "move/stream/plan.h"
#include "move/stream/reader.h"
#include "move/stream/unpack.h"
#include "move/stream/writer.h"

namespace capsule::move {
namespace {

using ::capsule::testing::MakeTempDir;
using ::capsule::testing::ScopedLimit;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// Every entry under `dir` with its type, mode, size and digest or link target: two equal
// listings mean the folder is byte for byte as it was.
std::string Listing(const std::string& dir) {
  if (!PathExists(dir)) return "(absent)";
  auto entries = ListTree(dir);
  EXPECT_TRUE(entries.ok()) << entries.status().ToString();
  std::string out;
  for (const TreeEntry& e : *entries) {
    out += e.path + " " + std::to_string(static_cast<int>(e.type)) + " " + std::to_string(e.mode) + " " +
           std::to_string(e.size);
    if (e.type == TreeEntry::Type::kFile) out += " " + *Sha256File(JoinPath(dir, e.path));
    if (e.type == TreeEntry::Type::kSymlink) out += " -> " + e.link_target;
    out += "\n";
  }
  return out;
}

// Staging debris (".tmp-" anywhere) under `root`.
std::vector<std::string> Debris(const std::string& root) {
  std::vector<std::string> found;
  for (const TreeEntry& e : *ListTree(root)) {
    if (Contains(e.path, kTempPrefix)) found.push_back(e.path);
  }
  return found;
}

std::string Pack(const std::string& dir, const PackOptions& options, PackStats* stats = nullptr) {
  StringSink sink;
  Status status = PackCapsule(dir, options, &sink, stats);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return sink.data();
}

Status Unpack(const std::string& stream, const std::string& dir, UnpackOptions options = {},
              UnpackStats* stats = nullptr) {
  StringSource source(stream);
  return UnpackStream(&source, dir, options, stats);
}

// A forged stream: the manifest (with a correct LNK.sha256) first, then what a test adds.
class Forge {
 public:
  explicit Forge(const std::string& manifest_text) : tar_(&sink_) {
    File(kStreamManifestName, manifest_text);
  }
  Forge& File(const std::string& path, const std::string& data) {
    EXPECT_TRUE(tar_.AddFile(path, data, 0644, {{kDigestRecord, Sha256Hex(data)}}).ok()) << path;
    return *this;
  }
  Forge& Raw(const std::function<void(TarWriter&)>& write) {
    write(tar_);
    return *this;
  }
  Forge& End() { return File(kStreamEndName, ""); }
  std::string Finish() {
    EXPECT_TRUE(tar_.Finish().ok());
    return sink_.data();
  }

 private:
  StringSink sink_;
  TarWriter tar_;
};

// The offset of the ustar header named `path` (not its pax header, "PaxHeader/<path>").
size_t HeaderAt(const std::string& tar, const std::string& path) {
  std::string name = path + std::string(1, '\0');
  for (size_t at = tar.find(name); at != std::string::npos; at = tar.find(name, at + 1)) {
    if (at % 512 == 0) return at;
  }
  ADD_FAILURE() << "no header " << path;
  return 0;
}

// Rewrites one field of the ustar header of `path` and fixes the header checksum.
std::string PatchHeader(std::string tar, const std::string& path, size_t offset, const std::string& field) {
  size_t at = HeaderAt(tar, path);
  tar.replace(at + offset, field.size(), field);
  unsigned sum = 0;
  for (size_t i = 0; i < 512; ++i) sum += (i >= 148 && i < 156) ? ' ' : static_cast<unsigned char>(tar[at + i]);
  std::snprintf(&tar[at + 148], 8, "%06o", sum);
  tar[at + 155] = ' ';
  return tar;
}

std::string PatchType(const std::string& tar, const std::string& path, char flag) {
  return PatchHeader(tar, path, 156, std::string(1, flag));
}

class StreamTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("stream");
    ws_ = root_ + "/ws";
    ASSERT_TRUE(MakeDirectories(ws_ + "/src").ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/README.md", "# sample\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/src/main.py", "print('hi')\n").ok());
    ASSERT_TRUE(WriteFileAtomic(ws_ + "/src/old.py", "print('old')\n").ok());
    src_ = root_ + "/src";
    CreateOptions options;
    options.agent = {"agent-7", "Sample", std::nullopt};
    options.workspace_source = ws_;
    ASSERT_TRUE(CreateCapsule(src_, options).ok());
  }

  StreamManifest ManifestFor(Phase phase, const std::string& move = std::string(32, 'a')) {
    StreamManifest m;
    m.phase = phase;
    m.move = move;
    m.version = "test";
    m.agent = {"agent-7", "Sample", std::nullopt};
    m.epoch = 2;
    return m;
  }
  std::string ManifestText(Phase phase, const std::string& move = std::string(32, 'a')) {
    return *ManifestFor(phase, move).ToCanonicalText();
  }

  // A received copy of src_ at root_/dst, the destination most refusals are tried on.
  std::string ReceivedCopy(const std::string& move = std::string(32, 'a')) {
    std::string dst = root_ + "/dst";
    PackOptions options;
    options.move_id = move;
    Status status = Unpack(Pack(src_, options), dst);
    EXPECT_TRUE(status.ok()) << status.ToString();
    return dst;
  }

  // Changes the workspace of src_ through the library, then refreshes its manifest.
  void PutSourceFile(const std::string& path, const std::string& data) {
    std::string local = root_ + "/put.tmpfile";
    ASSERT_TRUE(WriteFileAtomic(local, data).ok());
    ASSERT_TRUE(PutWorkspaceFile(src_, path, local).ok());
    ::unlink(local.c_str());
    RefreshManifest(src_);
  }
  void RemoveSourceFile(const std::string& path) {
    Snapshot snapshot = *Snapshot::Load(src_);
    snapshot.Remove(path);
    ASSERT_TRUE(snapshot.Save(src_).ok());
    RefreshManifest(src_);
  }
  static void RefreshManifest(const std::string& dir) {
    Manifest old = *Manifest::Load(dir);
    auto fresh = BuildManifest(dir, old.agent, old.holder_machine, old.holder_epoch);
    ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
    ASSERT_TRUE(fresh->Save(dir).ok());
  }

  // Puts a 3 MiB big.bin (over a buffer: hashed in pieces) into src_, then changes one byte of
  // its blob in place (the same size); returns the blob's path.
  std::string DamagedBigBlob() {
    PutSourceFile("big.bin", std::string(3 << 20, 'b'));
    Snapshot snapshot = *Snapshot::Load(src_);
    const SnapshotEntry* entry = snapshot.Find("big.bin");
    EXPECT_NE(entry, nullptr);
    std::string blob = JoinPath(src_, BlobPath(entry ? entry->sha256 : ""));
    EXPECT_TRUE(PathExists(blob)) << blob;
    std::string changed(3 << 20, 'b');
    changed[2 << 20] = 'c';
    EXPECT_TRUE(WriteFileAtomic(blob, changed).ok());
    return blob;
  }

  // `stream` must be refused into `dir` with an error containing `expect`, placing nothing.
  void ExpectRefused(const std::string& stream, const std::string& dir, const std::string& expect,
                     UnpackOptions options = {}) {
    std::string before = Listing(dir);
    Status status = Unpack(stream, dir, options);
    EXPECT_FALSE(status.ok()) << "accepted; expected refusal: " << expect;
    EXPECT_TRUE(Contains(status.ToString(), expect)) << status.ToString();
    EXPECT_EQ(Listing(dir), before) << "the destination changed";
    EXPECT_TRUE(Debris(root_).empty()) << Debris(root_).front();
  }

  std::string root_, ws_, src_;
};

// ---- round trips ----

// A have reads back as it was written, by the fast reader (canonical text) or the general one
// (any JSON: spaces, keys out of order, escapes), and each refuses what is not a have.
TEST(HaveTextTest, ReadsBackWhatWasWrittenAndRefusesWhatIsNotAHave) {
  const std::string a = Sha256Hex("a"), b = Sha256Hex("b");
  HaveMap have = {{"files/x y.txt", a}, {"files/\u00e9t\u00e9", b}, {"memory/notes.md", a}};
  have.emplace("files/quote\"d", b);  // needs escaping: written through the general writer
  Result<std::string> text = HaveToJson(have);
  ASSERT_TRUE(text.ok());
  Result<HaveMap> back = ParseHave(*text);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, have);
  have.erase("files/quote\"d");
  text = HaveToJson(have);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{\"files/x y.txt\":\"" + a + "\",\"files/\u00e9t\u00e9\":\"" + b + "\",\"memory/notes.md\":\"" + a + "\"}");
  EXPECT_EQ(*ParseHave(*text), have);
  HaveMap plain = {{"files/a", b}, {"memory/notes.md", a}};
  EXPECT_EQ(*ParseHave(*HaveToJson(plain)), plain);
  EXPECT_EQ(*ParseHave("{\"memory/notes.md\":\"" + a + "\",\"files/a\":\"" + b + "\"}"), plain) << "keys out of order";
  std::string loose = "{ \"memory/notes.md\" : \"" + a + "\", \"files/a\": \"" + b + "\" }";
  EXPECT_EQ(*ParseHave(loose), (HaveMap{{"files/a", b}, {"memory/notes.md", a}}));
  const std::vector<std::string> bads = {"[]", "{\"files/a\":\"" + a.substr(1) + "\"}", "{\"files/a\":1}",
                                         "{\"files/a\":\"" + a + "\"} x", "{\"files/a\""};
  for (const std::string& bad : bads) {
    Result<HaveMap> refused = ParseHave(bad, Code::kCorruption);
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_EQ(refused.status().code(), Code::kCorruption) << bad;
  }
}

TEST_F(StreamTest, RoundTripOfManySmallAndAFewLargeFiles) {
  std::map<std::string, std::string> files;
  for (int i = 0; i < 300; ++i) {
    files["small/d" + std::to_string(i % 10) + "/f" + std::to_string(i)] = "file " + std::to_string(i) + std::string(i * 7, 'x');
  }
  std::string large(5 << 20, '\0');
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (int i = 0; i < 3; ++i) files["large/l" + std::to_string(i)] = std::to_string(i) + large.substr(i);
  for (size_t size : {0, 1, 65535, 65536, 65537, 2 * 65536 + 500}) {
    files["edge/size-" + std::to_string(size)] = large.substr(1000, size);
  }
  std::string ws = root_ + "/big-ws";
  for (const auto& [path, data] : files) {
    ASSERT_TRUE(MakeDirectories(DirName(JoinPath(ws, path))).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(ws, path), data).ok());
  }
  std::string big = root_ + "/big";
  CreateOptions options;
  options.agent = {"agent-big", "Big", std::string("ops")};
  options.workspace_source = ws;
  ASSERT_TRUE(CreateCapsule(big, options).ok());

  PackStats pack;
  std::string stream = Pack(big, {}, &pack);
  EXPECT_EQ(pack.files_sent, files.size() + 4);  // and notes, journal, vector index, environment
  EXPECT_EQ(pack.files_skipped, 0u);
  std::string dst = root_ + "/big-dst";
  UnpackStats unpack;
  Status status = Unpack(stream, dst, {}, &unpack);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(unpack.manifest.agent.owner, std::optional<std::string>("ops"));
  EXPECT_EQ(unpack.files_received, pack.files_sent);
  EXPECT_EQ(unpack.file_bytes, pack.file_bytes_sent);
  for (const auto& [path, data] : files) {
    auto back = ReadWorkspaceFile(dst, path);
    ASSERT_TRUE(back.ok()) << path << ": " << back.status().ToString();
    EXPECT_TRUE(*back == data) << path;
  }
  for (const char* same : {kWorkingMemoryPath, kEnvironmentSpecPath, kVectorIndexPath, kJournalPath}) {
    EXPECT_EQ(*ReadFile(JoinPath(dst, same)), *ReadFile(JoinPath(big, same))) << same;
  }
  auto report = VerifyFolder(dst);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->problems.front();
  // A received copy is not held here, and records its move.
  EXPECT_EQ(HolderRecord::Load(dst)->state, HolderState::kRetired);
  EXPECT_TRUE(Contains(*ReadFile(dst + "/.capsule/move.json"), pack.move_id));
  EXPECT_TRUE(Debris(root_).empty());
}

// Owners travel: a file, a folder and a link that name one arrive naming the same; an entry
// that names none arrives naming none; an owner that is not a 32-bit number is refused.
TEST_F(StreamTest, OwnersTravelWithTheirEntries) {
  Snapshot snapshot = *Snapshot::Load(src_);
  SnapshotEntry file = *snapshot.Find("README.md");
  file.uid = 1000;
  file.gid = 1001;
  snapshot.Set("README.md", file);
  SnapshotEntry folder = *snapshot.Find("src");
  folder.uid = 0;
  folder.gid = 50;
  snapshot.Set("src", folder);
  SnapshotEntry link;
  link.type = SnapshotEntry::Type::kSymlink;
  link.target = "/usr/bin/python3";
  link.uid = 4294967295u;
  snapshot.Set("python", link);
  ASSERT_TRUE(snapshot.Save(src_).ok());
  RefreshManifest(src_);
  std::string dst = ReceivedCopy();
  Snapshot arrived = *Snapshot::Load(dst);
  for (const char* path : {"README.md", "src", "python", "src/main.py"}) {
    ASSERT_NE(arrived.Find(path), nullptr) << path;
    EXPECT_EQ(arrived.Find(path)->uid, snapshot.Find(path)->uid) << path;
    EXPECT_EQ(arrived.Find(path)->gid, snapshot.Find(path)->gid) << path;
  }
  EXPECT_FALSE(arrived.Find("src/main.py")->uid.has_value());

  for (const char* bad : {"-1", "4294967296", "12a", ""}) {
    std::string stream = Forge(ManifestText(Phase::kCopy))
                             .Raw([&](TarWriter& w) {
                               ASSERT_TRUE(w.AddFile("files/x", "x", 0644,
                                                     {{kDigestRecord, Sha256Hex("x")}, {kUidRecord, bad}})
                                               .ok());
                             })
                             .End()
                             .Finish();
    ExpectRefused(stream, dst, "is not a 32-bit owner number");
  }
}

TEST_F(StreamTest, SameCapsulePacksToTheSameBytesButForTheMoveId) {
  PackOptions options;
  options.move_id = std::string(32, 'b');
  EXPECT_EQ(Pack(src_, options), Pack(src_, options));
  auto have = HaveOfCapsule(src_);
  ASSERT_TRUE(have.ok());
  EXPECT_TRUE(have->count("files/README.md"));
  EXPECT_EQ(have->at("files/README.md"), Sha256Hex("# sample\n"));
  EXPECT_TRUE(have->count(kStreamNotes));
}

TEST_F(StreamTest, FilesPhaseCarriesOnlyTheWorkspace) {
  std::string dst = ReceivedCopy();
  PutSourceFile("src/main.py", "print('files phase')\n");
  PackOptions options;
  options.phase = Phase::kFiles;
  PackStats stats;
  std::string stream = Pack(src_, options, &stats);
  EXPECT_FALSE(Contains(stream, kStreamNotes));
  ASSERT_TRUE(Unpack(stream, dst).ok());
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src/main.py"), "print('files phase')\n");
}

// ---- have and removed ----

TEST_F(StreamTest, HaveSkipsWhatTheReceiverHoldsAndSwitchRemovesWhatIsGone) {
  std::string dst = ReceivedCopy();
  PutSourceFile("src/main.py", "print('changed')\n");
  PutSourceFile("src/new.py", "print('new')\n");
  // Between "src/old.py" and what would lie beneath it in path order: not removed with it.
  PutSourceFile("src/old.py.orig", "print('kept')\n");
  RemoveSourceFile("src/old.py");

  PackOptions copy;
  copy.move_id = std::string(32, 'c');
  copy.have = *HaveOfCapsule(dst);
  PackStats stats;
  std::string stream = Pack(src_, copy, &stats);
  EXPECT_EQ(stats.files_sent, 3u);  // changed and new: nothing else
  EXPECT_EQ(stats.file_bytes_sent, std::string("print('changed')\n").size() + std::string("print('new')\n").size() +
                                       std::string("print('kept')\n").size());
  EXPECT_EQ(stats.removed, 0u);  // a copy removes nothing
  EXPECT_FALSE(Contains(stream, "# sample"));
  ASSERT_TRUE(Unpack(stream, dst).ok());
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src/main.py"), "print('changed')\n");
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src/new.py"), "print('new')\n");
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src/old.py"), "print('old')\n");
  EXPECT_EQ(*ReadWorkspaceFile(dst, "README.md"), "# sample\n");

  PackOptions sw;
  sw.phase = Phase::kSwitch;
  sw.move_id = copy.move_id;
  sw.have = *HaveOfCapsule(dst);
  PackStats switch_stats;
  std::string switch_stream = Pack(src_, sw, &switch_stats);
  EXPECT_EQ(switch_stats.files_sent, 0u);
  EXPECT_EQ(switch_stats.removed, 1u);
  UnpackOptions sealed;
  sealed.sealed = true;
  UnpackStats unpack;
  Status status = Unpack(switch_stream, dst, sealed, &unpack);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(unpack.manifest.removed, std::vector<std::string>{"files/src/old.py"});
  EXPECT_FALSE(ReadWorkspaceFile(dst, "src/old.py").ok());
  EXPECT_EQ(Snapshot::Load(dst)->Find("src/old.py"), nullptr);
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src/old.py.orig"), "print('kept')\n");
  EXPECT_TRUE(VerifyFolder(dst)->ok());
  EXPECT_EQ(*HaveOfCapsule(dst), *HaveOfCapsule(src_));
}

TEST_F(StreamTest, SwitchReplacesTheScheduleFolder) {
  std::string dst = ReceivedCopy(std::string(32, 'd'));
  ASSERT_TRUE(MakeDirectories(src_ + "/schedule/waiting").ok());
  ASSERT_TRUE(WriteFileAtomic(src_ + "/schedule/waiting/job1.json",
                              "{ \"prompt\": \"p\", \"id\": \"job1\", \"at\": \"2026-12-04T08:00:00Z\" }").ok());
  RefreshManifest(src_);
  ASSERT_TRUE(MakeDirectories(dst + "/schedule/ending").ok());
  ASSERT_TRUE(WriteFileAtomic(dst + "/schedule/ending/stale.json",
                              R"({"at":"2026-12-04T08:00:00Z","id":"stale","prompt":"p"})").ok());
  RefreshManifest(dst);
  PackOptions sw;
  sw.phase = Phase::kSwitch;
  sw.move_id = std::string(32, 'd');
  UnpackOptions sealed;
  sealed.sealed = true;
  // Running schedules do not travel.
  StringSink refused_to;
  Status refused = PackCapsule(src_, sw, &refused_to, nullptr);
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition) << refused.ToString();
  ASSERT_TRUE(WriteFileAtomic(src_ + "/schedule/state.json", R"({"paused":true})").ok());
  RefreshManifest(src_);
  Status status = Unpack(Pack(src_, sw), dst, sealed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(*ReadFile(dst + "/schedule/waiting/job1.json"),
            R"({"at":"2026-12-04T08:00:00Z","id":"job1","prompt":"p"})");  // canonical
  EXPECT_EQ(*ReadFile(dst + "/schedule/state.json"), R"({"paused":true})");
  EXPECT_FALSE(PathExists(dst + "/schedule/ending/stale.json"));
  EXPECT_TRUE(VerifyFolder(dst)->ok());
}

// ---- the journal ----

class JournalTest : public StreamTest {
 protected:
  // Appends a real event to `dir`'s journal as that copy's own machine; a received copy is
  // held for the moment of the append only.
  void Append(const std::string& dir, const std::string& text) {
    auto record = HolderRecord::Load(dir);
    ASSERT_TRUE(record.ok());
    HolderState was = record->state;
    record->state = HolderState::kActive;
    ASSERT_TRUE(record->Save(dir).ok());
    auto journal = journal::Journal::OpenForWrite(dir);
    ASSERT_TRUE(journal.ok()) << journal.status().ToString();
    ASSERT_TRUE(journal->Append("user_message", Json{{"text", text}}).ok());
    record->state = was;
    ASSERT_TRUE(record->Save(dir).ok());
  }
  std::string Journal(const std::string& dir) { return *ReadFile(dir + "/" + kJournalPath); }
  size_t Lines(const std::string& text) { return static_cast<size_t>(std::count(text.begin(), text.end(), '\n')); }

  // A move's copy of src_ after `events` events were said, unpacked at `dst`, and the options
  // of its switch (the receiver's have, the journal the copy sent).
  PackOptions CopiedAndSwitchOptions(int events, const std::string& dst, PackStats* copied) {
    for (int i = 0; i < events; ++i) Append(src_, "before the copy " + std::to_string(i));
    PackOptions copy;
    copy.move_id = std::string(32, 'a');
    EXPECT_TRUE(Unpack(Pack(src_, copy, copied), dst).ok());
    PackOptions sw;
    sw.phase = Phase::kSwitch;
    sw.move_id = copy.move_id;
    sw.held_journal = copied->journal;
    return sw;
  }
};

TEST_F(JournalTest, HeldPrefixTakesTheArrivingJournal) {
  Append(src_, "one");
  std::string dst = ReceivedCopy();
  EXPECT_EQ(Journal(dst), Journal(src_));
  Append(src_, "two");
  Status status = Unpack(Pack(src_, {}), dst);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Journal(dst), Journal(src_));
  EXPECT_EQ(Lines(Journal(dst)), 2u);
  EXPECT_TRUE(VerifyFolder(dst)->ok());
}

TEST_F(JournalTest, ArrivingBehindWhatIsHeldKeepsWhatIsHeld) {
  Append(src_, "one");
  std::string dst = ReceivedCopy();
  Append(dst, "the receiver's own");
  std::string held = Journal(dst);
  ASSERT_TRUE(Unpack(Pack(src_, {}), dst).ok());
  EXPECT_EQ(Journal(dst), held);
}

// A switch whose receiver holds the journal the copy sent carries only the events appended
// since (LNK.append.*), and the receiver's journal is the sender's whole.
TEST_F(JournalTest, ASwitchCarriesOnlyTheEventsAppendedSinceTheCopy) {
  PackStats copied;
  const std::string dst = root_ + "/dst";
  PackOptions sw = CopiedAndSwitchOptions(200, dst, &copied);
  const std::string held = Journal(dst);
  EXPECT_EQ(copied.journal.size, held.size());
  EXPECT_EQ(copied.journal.sha256, Sha256Hex(held));
  Append(src_, "during the copy");
  Append(src_, "and one more");

  sw.have = *HaveOfCapsule(dst);
  PackStats switched;
  std::string stream = Pack(src_, sw, &switched);
  const std::string whole = Journal(src_);
  EXPECT_EQ(switched.file_bytes_sent, whole.size() - held.size()) << "only the two new events";
  EXPECT_TRUE(Contains(stream, std::string(kAppendSizeRecord) + "=" + std::to_string(held.size())));
  EXPECT_FALSE(Contains(stream, "before the copy 7\""));
  UnpackOptions sealed;
  sealed.sealed = true;
  Status status = Unpack(stream, dst, sealed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Journal(dst), whole);
  EXPECT_TRUE(VerifyFolder(dst)->ok());

  // Nothing new since: the journal is skipped as held, whole.
  sw.have = *HaveOfCapsule(dst);
  sw.held_journal = HeldJournal{whole.size(), Sha256Hex(whole), nullptr, std::nullopt};
  Pack(src_, sw, &switched);
  EXPECT_EQ(switched.files_sent, 0u);
}

// A copy keeps its journal digest's state; the switch continues it over what was appended
// and, when the capsule's manifest (a freeze's checkpoint) gives the journal that digest,
// knows the journal begins with what the receiver holds without reading it again. A
// manifest that does not vouch so (not brought up to date, or the journal changed before the
// held bytes' end) has the held bytes read and compared, as without the state.
TEST_F(JournalTest, ASwitchKnowsItsJournalGrewFromTheManifestsDigest) {
  auto record = [](const std::string& dir) {
    Result<Manifest> manifest = Manifest::Load(dir);
    ASSERT_TRUE(manifest.ok());
    ASSERT_TRUE(RefreshManifestEntries(dir, {kJournalPath}, &*manifest).ok());
    ASSERT_TRUE(manifest->Save(dir).ok());
  };
  PackStats copied;
  const std::string dst = root_ + "/dst";
  PackOptions sw = CopiedAndSwitchOptions(50, dst, &copied);
  ASSERT_NE(copied.journal.seen, nullptr);
  EXPECT_EQ(Sha256(*copied.journal.seen->state).FinishHex(), copied.journal.sha256);
  const std::string held = Journal(src_);
  sw.have = *HaveOfCapsule(dst);
  UnpackOptions sealed;
  sealed.sealed = true;

  // Nothing appended: held whole, skipped.
  record(src_);
  PackStats stats;
  Pack(src_, sw, &stats);
  EXPECT_EQ(stats.files_sent, 0u);

  // Appended, the manifest up to date: only the new event, which the receiver takes.
  Append(src_, "during the copy");
  record(src_);
  std::string appended = Pack(src_, sw, &stats);
  EXPECT_TRUE(Contains(appended, std::string(kAppendSizeRecord) + "=" + std::to_string(held.size())));
  EXPECT_EQ(stats.file_bytes_sent, Journal(src_).size() - held.size());

  // The manifest vouches for the journal it was told of, in the file the copy read, ending
  // its held bytes as they did: the held bytes are not read again. (Here the file's first
  // line was changed in place behind the manifest's back, which a mount never lets happen;
  // the receiver gets the journal the manifest names.)
  const std::string grown = Journal(src_);
  std::string edited = grown;
  edited.replace(edited.find("before the copy 0"), 6, "BEFORE");
  {
    // Packed as a mount's folder is (the folder's driver lock held, so that the pack leaves the
    // trust check to the mount): what is tested here is the held bytes, not trust, which
    // refuses a capsule at rest edited like this.
    Result<UniqueFd> as_if_mounted = LockForMount(src_);
    ASSERT_TRUE(as_if_mounted.ok()) << as_if_mounted.status().ToString();
    auto edit_in_place = [&](size_t at, const std::string& bytes) {
      UniqueFd fd(::open((src_ + "/" + kJournalPath).c_str(), O_WRONLY));
      ASSERT_TRUE(fd.valid());
      ASSERT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(at)), static_cast<ssize_t>(bytes.size()));
    };
    edit_in_place(grown.find("before the copy 0"), "BEFORE");
    Pack(src_, sw, &stats);
    EXPECT_EQ(stats.file_bytes_sent, grown.size() - held.size()) << "only what follows the held bytes is read";
    // An edit among the held bytes' last 4 KiB is seen, and so is another file in its place:
    // the held bytes are read, differ, and the journal goes whole.
    edit_in_place(grown.find("before the copy 0"), "before");
    edit_in_place(held.size() - 100, "X");
    Pack(src_, sw, &stats);
    EXPECT_EQ(stats.file_bytes_sent, grown.size()) << "an edit near the held bytes' end is seen";
    edit_in_place(held.size() - 100, std::string(1, grown[held.size() - 100]));
    ASSERT_TRUE(WriteFileAtomic(src_ + "/" + kJournalPath, edited).ok());  // another file
    Pack(src_, sw, &stats);
    EXPECT_EQ(stats.file_bytes_sent, grown.size()) << "a journal replaced since the copy is read";
  }

  // The manifest brought up to date with that journal: it no longer vouches, the held bytes
  // are read and differ, and the journal goes whole.
  record(src_);
  std::string whole = Pack(src_, sw, &stats);
  EXPECT_FALSE(Contains(whole, kAppendSizeRecord));
  EXPECT_EQ(stats.file_bytes_sent, edited.size());

  // Appended to without the manifest told (a capsule not mounted): read and compared, and
  // still only the new events cross.
  ASSERT_TRUE(WriteFileAtomic(src_ + "/" + kJournalPath, grown).ok());
  record(src_);
  Append(src_, "after the manifest");
  std::string stale = Pack(src_, sw, &stats);
  EXPECT_TRUE(Contains(stale, std::string(kAppendSizeRecord) + "=" + std::to_string(held.size())));
  EXPECT_EQ(stats.file_bytes_sent, Journal(src_).size() - held.size());
  Status status = Unpack(stale, dst, sealed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Journal(dst), Journal(src_));
}

// The events sent as appended to a journal the receiver does not hold are refused whole: the
// receiver's journal differs (its own event), or it holds none.
TEST_F(JournalTest, EventsAppendedToAJournalNotHeldAreRefused) {
  Append(src_, "one");
  const std::string before = Journal(src_);
  std::string dst = ReceivedCopy();
  Append(dst, "the receiver's own");
  Append(src_, "two");
  PackOptions sw;
  sw.phase = Phase::kSwitch;
  sw.move_id = std::string(32, 'a');
  sw.have = *HaveOfCapsule(dst);
  sw.held_journal = HeldJournal{before.size(), Sha256Hex(before), nullptr, std::nullopt};
  UnpackOptions sealed;
  sealed.sealed = true;
  ExpectRefused(Pack(src_, sw), dst, "the stream appends to a journal of " + std::to_string(before.size()), sealed);
  std::string none = root_ + "/none";
  ASSERT_TRUE(CopyCapsule(dst, none, {local::kMoveRecord}).ok());
  ASSERT_EQ(::unlink((none + "/" + kJournalPath).c_str()), 0);
  ExpectRefused(Pack(src_, sw), none, "none is held here", sealed);

  // A sender whose journal no longer begins with what it names sends the journal whole.
  PackStats stats;
  sw.held_journal = HeldJournal{before.size(), Sha256Hex("not this journal"), nullptr, std::nullopt};
  std::string whole = Pack(src_, sw, &stats);
  EXPECT_FALSE(Contains(whole, kAppendSizeRecord));
  EXPECT_EQ(stats.file_bytes_sent, Journal(src_).size());
}

TEST_F(StreamTest, AppendRecordsOnAnythingButTheJournalOfASwitchAreRefused) {
  std::string dst = ReceivedCopy();
  auto forged = [&](Phase phase, const char* path, std::map<std::string, std::string> pax) {
    pax[kDigestRecord] = Sha256Hex("x\n");
    return Forge(ManifestText(phase))
        .Raw([&](TarWriter& tar) {
          if (std::string(path).rfind("files/", 0) == 0) {
            EXPECT_TRUE(tar.AddDirectory("files").ok());
          }
          EXPECT_TRUE(tar.AddFile(path, "x\n", 0644, pax).ok());
        })
        .End()
        .Finish();
  };
  const std::string good = Sha256Hex("");
  ExpectRefused(forged(Phase::kCopy, kStreamJournal, {{kAppendSizeRecord, "3"}, {kAppendDigestRecord, good}}), dst,
                "LNK.append records are for the journal of a switch only");
  ExpectRefused(forged(Phase::kCopy, "files/a.txt", {{kAppendSizeRecord, "3"}, {kAppendDigestRecord, good}}), dst,
                "LNK.append records are for the journal of a switch only");
  UnpackOptions sealed;
  sealed.sealed = true;
  ExpectRefused(forged(Phase::kSwitch, "files/a.txt", {{kAppendSizeRecord, "3"}, {kAppendDigestRecord, good}}), dst,
                "LNK.append records are for the journal of a switch only", sealed);
  ExpectRefused(forged(Phase::kSwitch, kStreamJournal, {{kAppendSizeRecord, "3"}}), dst, "come together", sealed);
  ExpectRefused(forged(Phase::kSwitch, kStreamJournal, {{kAppendDigestRecord, good}}), dst, "come together", sealed);
  ExpectRefused(forged(Phase::kSwitch, kStreamJournal, {{kAppendSizeRecord, "3"}, {kAppendDigestRecord, "zz"}}), dst,
                "LNK.append.sha256 is not a SHA-256 in hex", sealed);
  ExpectRefused(forged(Phase::kSwitch, kStreamJournal, {{kAppendSizeRecord, "-3"}, {kAppendDigestRecord, good}}), dst,
                "is not a size in decimal", sealed);
}

TEST_F(JournalTest, DivergedJournalsAreMergedAsASetUnion) {
  Append(src_, "one");
  std::string dst = ReceivedCopy();
  Append(dst, "other");
  Append(src_, "two");
  Status status = Unpack(Pack(src_, {}), dst);
  ASSERT_TRUE(status.ok()) << status.ToString();
  std::string merged = Journal(dst);
  EXPECT_EQ(Lines(merged), 3u);
  for (const char* text : {"\"one\"", "\"two\"", "\"other\""}) EXPECT_NE(merged.find(text), std::string::npos) << text;
  EXPECT_TRUE(VerifyFolder(dst)->ok());
}

TEST_F(JournalTest, ABrokenArrivingJournalIsRefusedAndNothingPlaced) {
  Append(src_, "one");
  std::string dst = ReceivedCopy();
  Append(src_, "two");
  std::string text = Journal(src_);
  text.replace(text.find("\"two\""), 5, "\"TWO\"");  // the event no longer matches its id
  ASSERT_TRUE(WriteFileAtomic(src_ + "/" + kJournalPath, text).ok());
  RefreshManifest(src_);
  ExpectRefused(Pack(src_, {}), dst, "journal");
}

// ---- refusals: each places nothing ----

TEST_F(StreamTest, SetuidAndStickyBitsNeverArrive) {
  std::string dst = ReceivedCopy();
  std::string stream = Forge(ManifestText(Phase::kFiles))
                           .Raw([](TarWriter& tar) {
                             EXPECT_TRUE(tar.AddFile("files/suid", "x", 06755, {{kDigestRecord, Sha256Hex("x")}}).ok());
                           })
                           .End()
                           .Finish();
  Status status = Unpack(stream, dst);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(Snapshot::Load(dst)->Find("suid")->mode, 0755u);
}

TEST_F(StreamTest, ForgedGoodStreamIsAcceptedSoRefusalsMeanSomething) {
  std::string dst = ReceivedCopy();
  std::string stream = Forge(ManifestText(Phase::kFiles)).File("files/forged.txt", "forged\n").End().Finish();
  Status status = Unpack(stream, dst);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_EQ(*ReadWorkspaceFile(dst, "forged.txt"), "forged\n");
}

TEST_F(StreamTest, RefusesMissingManifest) {
  StringSink sink;
  TarWriter tar(&sink);
  ASSERT_TRUE(tar.AddFile("files/a", "a", 0644, {{kDigestRecord, Sha256Hex("a")}}).ok());
  ASSERT_TRUE(tar.AddFile(kStreamEndName, "", 0644, {{kDigestRecord, Sha256Hex("")}}).ok());
  ASSERT_TRUE(tar.Finish().ok());
  ExpectRefused(sink.data(), ReceivedCopy(), "where lnk-move-4.json must be");
  ExpectRefused(sink.data(), root_ + "/new", "where lnk-move-4.json must be");
}

TEST_F(StreamTest, RefusesEmptyStream) {
  StringSink sink;
  TarWriter tar(&sink);
  ASSERT_TRUE(tar.Finish().ok());
  ExpectRefused(sink.data(), ReceivedCopy(), "missing");
  ExpectRefused("", root_ + "/new", "");
}

TEST_F(StreamTest, RefusesManifestNotFirst) {
  StringSink sink;
  TarWriter tar(&sink);
  ASSERT_TRUE(tar.AddDirectory("files").ok());
  std::string m = ManifestText(Phase::kCopy);
  ASSERT_TRUE(tar.AddFile(kStreamManifestName, m, 0644, {{kDigestRecord, Sha256Hex(m)}}).ok());
  ASSERT_TRUE(tar.AddFile(kStreamEndName, "", 0644, {{kDigestRecord, Sha256Hex("")}}).ok());
  ASSERT_TRUE(tar.Finish().ok());
  ExpectRefused(sink.data(), ReceivedCopy(), "'files'");
}

TEST_F(StreamTest, RefusesManifestTwice) {
  std::string m = ManifestText(Phase::kCopy);
  ExpectRefused(Forge(m).File(kStreamManifestName, m).End().Finish(), ReceivedCopy(), "appears twice");
}

TEST_F(StreamTest, RefusesAnotherFormat) {
  std::string m = ManifestText(Phase::kCopy);
  size_t at = m.find("\"format\":4");
  ASSERT_NE(at, std::string::npos);
  m.replace(at, 10, "\"format\":3");
  ExpectRefused(Forge(m).End().Finish(), ReceivedCopy(), "another format");
}

TEST_F(StreamTest, RefusesManifestDigestThatDiffers) {
  StringSink sink;
  TarWriter tar(&sink);
  std::string m = ManifestText(Phase::kCopy);
  ASSERT_TRUE(tar.AddFile(kStreamManifestName, m, 0644, {{kDigestRecord, Sha256Hex(m + " ")}}).ok());
  ASSERT_TRUE(tar.AddFile(kStreamEndName, "", 0644, {{kDigestRecord, Sha256Hex("")}}).ok());
  ASSERT_TRUE(tar.Finish().ok());
  ExpectRefused(sink.data(), ReceivedCopy(), "digest differs");
}

TEST_F(StreamTest, RefusesFileWhoseDigestDiffers) {
  std::string stream = Forge(ManifestText(Phase::kCopy))
                           .Raw([](TarWriter& w) {
                             ASSERT_TRUE(w.AddFile("files/a", "tampered", 0644, {{kDigestRecord, Sha256Hex("original")}}).ok());
                           })
                           .End()
                           .Finish();
  ExpectRefused(stream, ReceivedCopy(), "'files/a': digest differs from its LNK.sha256");
  ExpectRefused(stream, root_ + "/new", "digest differs");
}

// Digests are checked on another thread, behind the writing: a refusal still names the
// first fault in the stream's order, and a file larger than every buffer the check holds is
// still checked whole.
TEST_F(StreamTest, ADigestThatDiffersIsNamedBeforeAFaultThatComesAfterIt) {
  std::string dst = ReceivedCopy();
  ExpectRefused(Forge(ManifestText(Phase::kCopy))
                    .Raw([](TarWriter& w) {
                      ASSERT_TRUE(w.AddFile("files/a", "tampered", 0644, {{kDigestRecord, Sha256Hex("original")}}).ok());
                    })
                    .File("files/b", "fine")
                    .File("files/../../x", "escapes")
                    .End()
                    .Finish(),
                dst, "'files/a': digest differs from its LNK.sha256");
  std::string large(40 << 20, 'x');
  std::string tampered = large;
  tampered.back() = 'y';  // the last byte, hashed long after the first were written
  std::string stream = Forge(ManifestText(Phase::kCopy))
                           .File("files/first", "fine")
                           .Raw([&](TarWriter& w) {
                             ASSERT_TRUE(w.AddFile("files/large", tampered, 0644, {{kDigestRecord, Sha256Hex(large)}}).ok());
                           })
                           .File("files/after", "fine")
                           .End()
                           .Finish();
  ExpectRefused(stream, dst, "'files/large': digest differs from its LNK.sha256");
  ExpectRefused(stream, root_ + "/new", "'files/large': digest differs");
}

// The sender checks that each file it sends is what the snapshot says, on another thread:
// a blob changed in place (same size) fails the pack naming it, and the stream written so far
// has no end, so a receiver refuses it whole.
TEST_F(StreamTest, APackOfABlobChangedInPlaceFailsAndLeavesAStreamWithoutItsEnd) {
  std::string blob = DamagedBigBlob();
  StringSink sink;
  PackOptions options;
  options.move_id = std::string(32, 'a');
  Status status = PackCapsule(src_, options, &sink, nullptr);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.ToString(), blob + ": does not hash to the digest it is sent under (altered on disk, or changed while being sent)")) << status.ToString();
  EXPECT_EQ(sink.data().find(kStreamEndName), std::string::npos);
  ExpectRefused(sink.data(), root_ + "/new", "stream");
}

// A receiver leaves the writing to the checking thread: every piece lands in its file, in
// order, before Finish returns, and a write that fails is named then (WriteFailed tells the
// receiving thread at once).
TEST_F(StreamTest, TheCheckingThreadWritesEachFileWholeAndNamesAWriteThatFails) {
  DigestCheck digests(/*buffers=*/2, /*buffer_size=*/4);  // pieces smaller than a file
  const std::string content = "one piece, then the next, then the last";
  auto send = [&](const std::string& path, UniqueFd fd) {
    digests.WriteFile(std::move(fd), path);
    for (size_t at = 0; at < content.size(); at += 4) {
      DigestCheck::Buffer* buffer = digests.Take();
      size_t n = std::min<size_t>(4, content.size() - at);
      std::memcpy(buffer->data(), content.data() + at, n);
      digests.Hash(buffer, n);
    }
    digests.EndFile(path, Sha256Hex(content));
  };
  std::string written = root_ + "/written";
  Result<UniqueFd> out = OpenFile(written, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  send(written, std::move(*out));
  EXPECT_EQ(digests.Finish(), std::nullopt);
  EXPECT_TRUE(digests.Written().ok()) << digests.Written().ToString();
  EXPECT_EQ(*ReadFile(written), content);

  std::string unwritable = root_ + "/unwritable";
  ASSERT_TRUE(WriteFileAtomic(unwritable, "").ok());
  Result<UniqueFd> read_only = OpenFile(unwritable, O_RDONLY | O_CLOEXEC);
  ASSERT_TRUE(read_only.ok());
  send(unwritable, std::move(*read_only));
  EXPECT_EQ(digests.Finish(), std::nullopt) << "the bytes handed over had their digest";
  Status status = digests.Written();
  EXPECT_TRUE(digests.WriteFailed());
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.ToString(), unwritable)) << status.ToString();
}

// A move's source sends blobs as read (hash_blobs off): a pack of a blob changed in place
// then succeeds, ends its stream, and the receiver's hash is what refuses it, naming the file.
TEST_F(StreamTest, APackThatLeavesBlobsToTheReceiverEndsItsStreamAndTheReceiverRefusesADamagedOne) {
  DamagedBigBlob();
  StringSink sink;
  PackOptions options;
  options.move_id = std::string(32, 'a');
  options.hash_blobs = false;
  Status status = PackCapsule(src_, options, &sink, nullptr);
  ASSERT_TRUE(status.ok()) << status.ToString();
  EXPECT_NE(sink.data().find(kStreamEndName), std::string::npos);
  ExpectRefused(sink.data(), root_ + "/new", "'files/big.bin': digest differs from its LNK.sha256");
}

// With blobs left to the receiver, a file sent from its own path (memory/, the journal) is
// still hashed as it is sent: one that changes after the plan fails the pack, naming it.
TEST_F(StreamTest, APackThatLeavesBlobsToTheReceiverStillHashesFilesSentFromTheirPaths) {
  PutSourceFile("big.bin", std::string(3 << 20, 'b'));  // sent before memory/, through the sink
  const std::string memory = JoinPath(src_, "memory/working_memory.md");
  std::string text = *ReadFile(memory);
  ASSERT_FALSE(text.empty());
  // Changes memory/working_memory.md (the same size) once the stream has begun.
  struct ChangingSink : StringSink {
    std::string path, changed;
    bool done = false;
    Status Write(std::string_view data) override {
      if (!done) done = WriteFileAtomic(path, changed).ok();
      return StringSink::Write(data);
    }
  } sink;
  sink.path = memory;
  sink.changed = std::string(text.size(), '#');
  PackOptions options;
  options.move_id = std::string(32, 'a');
  options.hash_blobs = false;
  Status status = PackCapsule(src_, options, &sink, nullptr);
  ASSERT_TRUE(sink.done);
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.ToString(), memory + ": does not hash to the digest it is sent under (altered on disk, or changed while being sent)")) << status.ToString();
  EXPECT_EQ(sink.data().find(kStreamEndName), std::string::npos);
}

// Empty files are closed by the receiving thread as they come: a workspace of many empty
// files unpacks with few descriptors to spare (each would otherwise wait open in the checking
// thread's queue, which no bytes wake).
TEST_F(StreamTest, ManyEmptyFilesArriveWithFewDescriptors) {
  std::string ws = root_ + "/empties";
  ASSERT_TRUE(MakeDirectories(ws).ok());
  for (int i = 0; i < 600; ++i) ASSERT_TRUE(WriteFileAtomic(ws + "/e" + std::to_string(i), "").ok());
  std::string src = root_ + "/empty-src";
  CreateOptions create;
  create.agent = {"agent-8", "Empties", std::nullopt};
  create.workspace_source = ws;
  ASSERT_TRUE(CreateCapsule(src, create).ok());
  PackOptions options;
  options.move_id = std::string(32, 'a');
  std::string stream = Pack(src, options);
  Status status;
  {
    ScopedLimit few_descriptors(RLIMIT_NOFILE, 128);
    ASSERT_TRUE(few_descriptors.ok());
    status = Unpack(stream, root_ + "/empty-dst");
  }
  ASSERT_TRUE(status.ok()) << status.ToString();
  Snapshot arrived = *Snapshot::Load(root_ + "/empty-dst"), sent = *Snapshot::Load(src);
  ASSERT_NE(arrived.Find("e599"), nullptr);
  EXPECT_EQ(*arrived.Find("e599"), *sent.Find("e599"));
  EXPECT_EQ(arrived.entries().size(), sent.entries().size());
}

// A write that fails at the receiver (here: past the file size limit) stops the stream and is
// named, the file with it; nothing is placed.
TEST_F(StreamTest, AWriteThatFailsAtTheReceiverIsNamedAndPlacesNothing) {
  PutSourceFile("big.bin", std::string(3 << 20, 'b'));
  PackOptions options;
  options.move_id = std::string(32, 'a');
  std::string stream = Pack(src_, options);
  std::string before = Listing(root_ + "/new");
  Status status;
  {
    ScopedLimit small_files(RLIMIT_FSIZE, 1 << 20);
    ASSERT_TRUE(small_files.ok());
    status = Unpack(stream, root_ + "/new");
  }
  ASSERT_FALSE(status.ok());
  EXPECT_TRUE(Contains(status.ToString(), "files/big.bin")) << status.ToString();
  EXPECT_TRUE(Contains(status.ToString(), "File too large")) << status.ToString();
  EXPECT_EQ(Listing(root_ + "/new"), before);
  EXPECT_TRUE(Debris(root_).empty()) << Debris(root_).front();
}

TEST_F(StreamTest, RefusesFileWithoutDigest) {
  std::string stream = Forge(ManifestText(Phase::kCopy))
                           .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddFile("files/a", "a").ok()); })
                           .End()
                           .Finish();
  ExpectRefused(stream, ReceivedCopy(), "'files/a': no LNK.sha256");
}

TEST_F(StreamTest, RefusesEndWithoutDigestOrNotEmpty) {
  std::string dst = ReceivedCopy();
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).Raw([](TarWriter& w) { ASSERT_TRUE(w.AddFile(kStreamEndName, "").ok()); }).Finish(),
                dst, "no LNK.sha256");
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File(kStreamEndName, "x").Finish(), dst, "must be empty");
}

TEST_F(StreamTest, RefusesEveryForbiddenPath) {
  std::string dst = ReceivedCopy();
  struct Case {
    Phase phase;
    std::string path;
    std::string expect;
  };
  std::vector<Case> cases = {
      {Phase::kCopy, "/etc/x", "unsafe path"},
      {Phase::kCopy, "files/../../x", "unsafe path"},
      {Phase::kCopy, "files/../memory/x", "unsafe path"},
      {Phase::kCopy, "files/./x", "unsafe path"},
      {Phase::kCopy, "files//x", "unsafe path"},
      {Phase::kCopy, "etc/x", "outside the folders a copy stream may hold"},
      {Phase::kCopy, "schedule/x", "outside the folders a copy stream may hold"},
      {Phase::kCopy, ".capsule/holder.json", "outside the folders"},
      {Phase::kCopy, "manifest.json", "outside the folders"},
      {Phase::kCopy, "filesx/a", "outside the folders"},
      {Phase::kFiles, "memory/x", "outside the folders a files stream may hold"},
      {Phase::kFiles, "harness/environment.json", "outside the folders a files stream may hold"},
      {Phase::kSwitch, "etc/x", "outside the folders a switch stream may hold"},
  };
  UnpackOptions sealed;
  sealed.sealed = true;  // so that a switch gets as far as its paths
  for (const Case& c : cases) {
    SCOPED_TRACE(c.path);
    ExpectRefused(Forge(ManifestText(c.phase)).File(c.path, "x").End().Finish(), dst, c.expect, sealed);
  }
  // Folders and links are judged by the same rule.
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).Raw([](TarWriter& w) { ASSERT_TRUE(w.AddDirectory("etc").ok()); }).End().Finish(),
                dst, "outside the folders");
  ExpectRefused(
      Forge(ManifestText(Phase::kCopy)).Raw([](TarWriter& w) { ASSERT_TRUE(w.AddSymlink("../x", "files").ok()); }).End().Finish(),
      dst, "unsafe path");
  // Nothing was written outside the destination either.
  EXPECT_FALSE(PathExists(root_ + "/x"));
  EXPECT_FALSE(PathExists("/etc/x"));
}

// Links are data: a target is kept as written wherever it points, and placing the stream
// reads and writes nothing through it (the files beside the capsule stay untouched).
TEST_F(StreamTest, KeepsLinkTargetsAsWrittenAndFollowsNone) {
  std::string dst = ReceivedCopy();
  ASSERT_TRUE(WriteFileAtomic(root_ + "/outside", "outside\n").ok());
  const std::vector<std::pair<std::string, std::string>> links = {
      {"files/venv/bin/python", "/usr/bin/python3"},  // a virtualenv's interpreter
      {"files/up", "../../../outside"},                // climbs out of the capsule
      {"files/a/b", "../up/x"},                        // a chain through another link
      {"files/dangling", "no/such/file"},
      {"files/self", "self"}};
  std::string stream = Forge(ManifestText(Phase::kCopy))
                           .Raw([&](TarWriter& w) {
                             for (const auto& [path, target] : links) ASSERT_TRUE(w.AddSymlink(path, target).ok());
                           })
                           .End()
                           .Finish();
  ASSERT_TRUE(Unpack(stream, dst).ok());
  Result<Snapshot> snapshot = Snapshot::Load(dst);
  ASSERT_TRUE(snapshot.ok());
  for (const auto& [path, target] : links) {
    const SnapshotEntry* entry = snapshot->Find(path.substr(6));
    ASSERT_NE(entry, nullptr) << path;
    EXPECT_EQ(entry->type, SnapshotEntry::Type::kSymlink) << path;
    EXPECT_EQ(entry->target, target) << path;
  }
  EXPECT_EQ(*ReadFile(root_ + "/outside"), "outside\n");
  EXPECT_TRUE(VerifyFolder(dst)->ok());
  // A stream applied over a received copy places a new folder: its record is bound to it.
  Result<HolderRecord> record = HolderRecord::Load(dst);
  EXPECT_TRUE(record.ok()) << record.status().ToString();
}

TEST_F(StreamTest, RefusesLinksThatCannotBeLinks) {
  std::string dst = ReceivedCopy();
  for (const auto& [target, why] : std::vector<std::pair<std::string, std::string>>{
           {"", "empty target"}, {std::string(kMaxLinkTarget, 'a'), "a link holds at most"}}) {
    SCOPED_TRACE(why);
    std::string stream = Forge(ManifestText(Phase::kCopy))
                             .Raw([&](TarWriter& w) { ASSERT_TRUE(w.AddSymlink("files/l", target).ok()); })
                             .End()
                             .Finish();
    ExpectRefused(stream, dst, why);
  }
}

TEST_F(StreamTest, RefusesEntriesOfOtherTypes) {
  std::string dst = ReceivedCopy();
  for (char flag : {'V', 'D', 'S', 'M'}) {
    SCOPED_TRACE(flag);
    std::string stream = Forge(ManifestText(Phase::kCopy))
                             .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddFile("files/odd", "").ok()); })
                             .End()
                             .Finish();
    ExpectRefused(PatchType(stream, "files/odd", flag), dst, "may travel");
  }
  // A FIFO or device as a tar entry, even under files/ (they travel in the manifest); a hard
  // link to nothing earlier, to a folder, out of files/.
  const std::pair<TarEntry::Type, std::string> specials[] = {{TarEntry::Type::kFifo, "FIFO"},
                                                              {TarEntry::Type::kCharDevice, "character device"},
                                                              {TarEntry::Type::kBlockDevice, "block device"}};
  for (const auto& [type, name] : specials) {
    TarEntry special;
    special.path = "files/pipe";
    special.type = type;
    ExpectRefused(
        Forge(ManifestText(Phase::kCopy)).Raw([&](TarWriter& w) { ASSERT_TRUE(w.AddSpecial(special).ok()); }).End().Finish(),
        dst, "stream entry 'files/pipe': a " + name + " as a tar entry");
  }
  ExpectRefused(Forge(ManifestText(Phase::kCopy))
                    .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddHardLink("files/a", "files/later").ok()); })
                    .File("files/later", "x")
                    .End()
                    .Finish(),
                dst, "not an earlier regular file");
  ExpectRefused(Forge(ManifestText(Phase::kCopy))
                    .Raw([](TarWriter& w) {
                      ASSERT_TRUE(w.AddDirectory("files/d").ok());
                      ASSERT_TRUE(w.AddHardLink("files/h", "files/d").ok());
                    })
                    .End()
                    .Finish(),
                dst, "not an earlier regular file");
  ExpectRefused(Forge(ManifestText(Phase::kCopy))
                    .File("files/a", "x")
                    .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddHardLink("memory/notes.md", "files/a").ok()); })
                    .End()
                    .Finish(),
                dst, "hard link outside files/");
}

// Hard links travel as tar hard links (every name, in every stream, never skipped for the
// receiver's have); FIFOs and devices in the stream manifest; a socket stays behind, as with tar.
TEST_F(StreamTest, HardLinksFifosAndDevicesTravel) {
  Snapshot snapshot = *Snapshot::Load(src_);
  SnapshotEntry file = *snapshot.Find("README.md");
  file.link = 7;
  snapshot.Set("README.md", file);
  snapshot.Set("src/again.md", file);
  SnapshotEntry fifo;
  fifo.type = SnapshotEntry::Type::kFifo;
  fifo.mode = 0640;
  snapshot.Set("pipe", fifo);
  SnapshotEntry device;
  device.type = SnapshotEntry::Type::kCharDevice;
  device.mode = 0666;
  device.rdev = makedev(1, 3);
  snapshot.Set("null", device);
  SnapshotEntry socket;
  socket.type = SnapshotEntry::Type::kSocket;
  socket.mode = 0755;
  snapshot.Set("sock", socket);
  ASSERT_TRUE(snapshot.Save(src_).ok());
  RefreshManifest(src_);
  std::string dst = ReceivedCopy();
  Snapshot arrived = *Snapshot::Load(dst);
  ASSERT_NE(arrived.Find("README.md"), nullptr);
  ASSERT_NE(arrived.Find("src/again.md"), nullptr);
  EXPECT_NE(arrived.Find("README.md")->link, 0u);
  EXPECT_EQ(arrived.Find("README.md")->link, arrived.Find("src/again.md")->link);
  EXPECT_EQ(arrived.Find("src/again.md")->sha256, file.sha256);
  EXPECT_NE(arrived.Find("src/main.py")->link, arrived.Find("README.md")->link);
  ASSERT_NE(arrived.Find("pipe"), nullptr);
  EXPECT_EQ(arrived.Find("pipe")->type, SnapshotEntry::Type::kFifo);
  EXPECT_EQ(arrived.Find("pipe")->mode, 0640u);
  ASSERT_NE(arrived.Find("null"), nullptr);
  EXPECT_EQ(arrived.Find("null")->type, SnapshotEntry::Type::kCharDevice);
  EXPECT_EQ(arrived.Find("null")->rdev, makedev(1, 3));
  {
    // In the manifest, not as tar entries.
    StringSource source(Pack(src_, PackOptions{}));
    TarReader reader(&source);
    TarEntry entry;
    while (*reader.Next(&entry)) {
      EXPECT_TRUE(entry.type != TarEntry::Type::kFifo && entry.type != TarEntry::Type::kCharDevice) << entry.path;
    }
  }
  EXPECT_EQ(arrived.Find("sock"), nullptr);
  auto report = VerifyFolder(dst);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << report->problems.front();

  // A switch against that have: both names travel again; a name unlinked since arrives alone.
  snapshot.Remove("src/again.md");
  snapshot.Remove("pipe");
  file.link = 0;
  snapshot.Set("README.md", file);
  ASSERT_TRUE(snapshot.Save(src_).ok());
  RefreshManifest(src_);
  PackOptions options;
  options.phase = Phase::kSwitch;
  options.move_id = std::string(32, 'a');
  options.have = *HaveOfCapsule(dst);
  std::string stream = Pack(src_, options);
  UnpackOptions sealed;
  sealed.sealed = true;
  Status status = Unpack(stream, dst, sealed);
  ASSERT_TRUE(status.ok()) << status.ToString();
  arrived = *Snapshot::Load(dst);
  EXPECT_EQ(arrived.Find("src/again.md"), nullptr);
  EXPECT_EQ(arrived.Find("pipe"), nullptr) << "a switch carries every FIFO the sender holds";
  EXPECT_NE(arrived.Find("null"), nullptr);
  EXPECT_EQ(arrived.Find("README.md")->link, 0u) << "one name left: a file of its own";
  EXPECT_TRUE(VerifyFolder(dst)->ok());
}

// The manifest's "special": each entry a plain path under files/, of a known type, with a
// device's numbers only on a device, never also a tar entry nor beneath a file of the stream.
TEST_F(StreamTest, RefusesBadSpecialFilesInTheManifest) {
  std::string dst = ReceivedCopy();
  auto with_special = [&](const std::string& path, const Json& item) {
    StreamManifest manifest = ManifestFor(Phase::kCopy, std::string(32, 'a'));
    Json json = Json::parse(*manifest.ToCanonicalText());
    json["special"] = {{path, item}};
    return *CanonicalJson(json, "manifest");
  };
  const Json fifo = {{"mode", 420}, {"type", "fifo"}};
  const struct {
    std::string path;
    Json item;
    std::string why;
  } cases[] = {
      {"memory/pipe", fifo, "special 'memory/pipe' is not a plain path under files/"},
      {"files/../pipe", fifo, "special 'files/../pipe' is not a plain path under files/"},
      {"files/pipe", {{"mode", 420}, {"type", "sock"}}, "type must be fifo, chr or blk"},
      {"files/pipe", {{"mode", 420}, {"type", "fifo"}, {"major", 1}, {"minor", 3}}, "a device's only"},
      {"files/null", {{"mode", 438}, {"type", "chr"}}, "a device's only"},
      {"files/pipe", {{"mode", 070000}, {"type", "fifo"}}, "mode must be permission bits"},
      {"files/pipe", {{"mode", 420}, {"type", "fifo"}, {"uid", 1ull << 32}}, "uid is not a 32-bit number"},
      {"files/pipe", {{"mode", 420}, {"type", "fifo"}, {"path", "x"}}, "unknown field 'path'"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.why);
    ExpectRefused(Forge(with_special(c.path, c.item)).End().Finish(), dst, c.why);
  }
  ExpectRefused(Forge(with_special("files/pipe", fifo)).File("files/pipe", "x").End().Finish(), dst,
                "stream entry 'files/pipe': duplicate entry");
  ExpectRefused(Forge(with_special("files/a/pipe", fifo)).File("files/a", "x").End().Finish(), dst,
                "lies beneath the link or file 'files/a'");
}

TEST_F(StreamTest, RefusesEpochPastTheBound) {
  std::string dst = ReceivedCopy();
  for (uint64_t epoch : {uint64_t{0}, kMaxEpoch + 1, UINT64_MAX}) {
    StreamManifest manifest = ManifestFor(Phase::kCopy);
    manifest.epoch = epoch;
    ExpectRefused(Forge(*manifest.ToCanonicalText()).End().Finish(), dst,
                  "epoch " + std::to_string(epoch) + ": an epoch is a whole number from 1 to 2^53-1");
  }
}

TEST_F(StreamTest, RefusesDuplicateEntries) {
  std::string dst = ReceivedCopy();
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/a", "1").File("files/a", "1").End().Finish(), dst,
                "duplicate entry");
  ExpectRefused(Forge(ManifestText(Phase::kCopy))
                    .File("files/a", "1")
                    .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddDirectory("files/a").ok()); })
                    .End()
                    .Finish(),
                dst, "duplicate entry");
  // "./files/a" is read as "files/a": still a duplicate.
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/a", "1").File("./files/a", "2").End().Finish(), dst,
                "duplicate entry");
}

TEST_F(StreamTest, RefusesSwitchWhoseMoveIsNotItsCopys) {
  std::string dst = ReceivedCopy(std::string(32, 'a'));
  UnpackOptions sealed;
  sealed.sealed = true;
  ExpectRefused(Forge(ManifestText(Phase::kSwitch, std::string(32, 'b'))).End().Finish(), dst,
                "the copy received here was of move " + std::string(32, 'a'), sealed);
  // And a switch where no copy was received at all.
  ExpectRefused(Forge(ManifestText(Phase::kSwitch)).End().Finish(), root_ + "/new", "needs the capsule its copy made",
                sealed);
}

TEST_F(StreamTest, RefusesSwitchNotSealed) {
  std::string dst = ReceivedCopy(std::string(32, 'a'));
  ExpectRefused(Forge(ManifestText(Phase::kSwitch, std::string(32, 'a'))).End().Finish(), dst,
                "did not arrive sealed");
}

TEST_F(StreamTest, RefusesSizeThatLies) {
  std::string dst = ReceivedCopy();
  std::string stream = Forge(ManifestText(Phase::kCopy)).File("files/a", std::string(1000, 'a')).End().Finish();
  // The header says 1000 bytes; only 600 follow.
  size_t data_at = stream.find(std::string(1000, 'a'));
  ASSERT_NE(data_at, std::string::npos);
  ExpectRefused(stream.substr(0, data_at + 600), dst, "cut short");
  // The header says more than the file holds: the next headers are read as its data.
  char size_field[12];
  std::snprintf(size_field, sizeof size_field, "%011o", 1000 + 1024);
  ExpectRefused(PatchHeader(stream, "files/a", 124, std::string(size_field, 11)), dst, "refused");
  // A size field that is not a number.
  ExpectRefused(PatchHeader(stream, "files/a", 124, "zzzzzzzzzzz"), dst, "refused");
}

TEST_F(StreamTest, RefusesStreamCutShort) {
  std::string dst = ReceivedCopy();
  std::string no_end = Forge(ManifestText(Phase::kCopy)).File("files/a", "a").Finish();
  ExpectRefused(no_end, dst, "lnk-move-4.end': missing: the stream was cut short");
  std::string big(200000, 'q');
  std::string full = Forge(ManifestText(Phase::kCopy)).File("files/big", big).End().Finish();
  size_t data_at = full.find(big);
  for (size_t cut : {size_t{0}, size_t{100}, size_t{512}, data_at - 1, data_at, data_at + 70000, full.size() - 10240 - 1}) {
    SCOPED_TRACE(cut);
    ExpectRefused(full.substr(0, cut), dst, "");
  }
  // The end entry arrived, but not the tar's end-of-archive marker.
  ExpectRefused(full.substr(0, HeaderAt(full, kStreamEndName) + 512), dst, "");
}

TEST_F(StreamTest, RefusesBytesAfterTheEnd) {
  std::string dst = ReceivedCopy();
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).End().File("files/late", "x").Finish(), dst,
                "'files/late': comes after lnk-move-4.end");
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).End().End().Finish(), dst, "comes after lnk-move-4.end");
  std::string good = Forge(ManifestText(Phase::kCopy)).End().Finish();
  ExpectRefused(good + "trailing garbage", dst, "bytes follow the end");
  std::string inside = good;
  inside[inside.size() - 100] = 'x';  // in the zero padding of the last record
  ExpectRefused(inside, dst, "bytes follow the end");
  // Zero bytes after the archive are only padding.
  EXPECT_TRUE(Unpack(good + std::string(512, '\0'), dst).ok());
}

TEST_F(StreamTest, RefusesStreamForAnotherAgent) {
  std::string dst = ReceivedCopy();
  StreamManifest m = ManifestFor(Phase::kCopy);
  m.agent.id = "agent-8";
  ExpectRefused(Forge(*m.ToCanonicalText()).End().Finish(), dst, "holds agent agent-7, the stream is for agent agent-8");
}

TEST_F(StreamTest, RefusesCapsuleThisMachineHolds) {
  ASSERT_EQ(HolderRecord::Load(src_)->state, HolderState::kActive);
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/README.md", "evil").End().Finish(), src_,
                "this machine holds the agent");
  // Frozen is held too.
  HolderRecord frozen = *HolderRecord::Load(src_);
  frozen.state = HolderState::kFrozen;
  ASSERT_TRUE(frozen.Save(src_).ok());
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).End().Finish(), src_, "frozen");
}

TEST_F(StreamTest, RefusesBadManifests) {
  std::string dst = ReceivedCopy();
  auto with = [&](const std::string& from, const std::string& to) {
    std::string m = ManifestText(Phase::kCopy);
    size_t at = m.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    m.replace(at, from.size(), to);
    return Forge(m).End().Finish();
  };
  ExpectRefused(with("\"phase\":\"copy\"", "\"phase\":\"steal\""), dst, "lnk-move-4.json");
  ExpectRefused(with(std::string(32, 'a'), std::string(31, 'a') + "A"), dst, "move must be 128 bits");
  ExpectRefused(with("\"epoch\":2", "\"epoch\":-2"), dst, "no epoch");
  ExpectRefused(with("\"phase\":\"copy\"", "\"phase\":\"copy\",\"removed\":[\"files/a\"]"), dst,
                "removed appears outside a switch");
  ExpectRefused(Forge("not json").End().Finish(), dst, "lnk-move-4.json");
}

TEST_F(StreamTest, RefusesRemovedOutsideFilesAndMemoryOrTheJournal) {
  std::string dst = ReceivedCopy(std::string(32, 'a'));
  UnpackOptions sealed;
  sealed.sealed = true;
  for (const std::string& path : {std::string("schedule/x"), std::string("files/../x"), std::string("/files/x")}) {
    StreamManifest m = ManifestFor(Phase::kSwitch);
    m.removed = {path};
    ExpectRefused(Forge(*m.ToCanonicalText()).End().Finish(), dst, "is not under files/ or memory/", sealed);
  }
  StreamManifest m = ManifestFor(Phase::kSwitch);
  m.removed = {kStreamJournal};
  ExpectRefused(Forge(*m.ToCanonicalText()).End().Finish(), dst, "never removed", sealed);
}

// ReadStream alone writes only under the folder it is given.
TEST_F(StreamTest, ReadStreamWritesOnlyIntoItsFolder) {
  std::string into = MakeTempDir("into");
  std::string stream = Forge(ManifestText(Phase::kCopy)).File("files/a/b", "b").File(kStreamNotes, "n").End().Finish();
  StringSource source(stream);
  auto read = ReadStream(&source, into);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->entries.size(), 2u);
  EXPECT_EQ(read->file_bytes, 2u);
  EXPECT_EQ(*ReadFile(into + "/files/a/b"), "b");
  EXPECT_EQ(*ReadFile(into + "/memory/notes.md"), "n");
}

}  // namespace
}  // namespace capsule::move

namespace capsule::move {
namespace {

// A path beneath a link would be written through the link wherever the workspace is laid out
// (files/l -> ../harness, then files/l/x lands in harness/x): refused, in either order.
TEST_F(StreamTest, RefusesEntriesBeneathALinkOrAFile) {
  std::string dst = ReceivedCopy();
  auto link = [](TarWriter& w) { ASSERT_TRUE(w.AddSymlink("files/l", "../harness").ok()); };
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).Raw(link).File("files/l/x", "x").End().Finish(), dst,
                "lies beneath the link or file 'files/l'");
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/l/x", "x").Raw(link).End().Finish(), dst,
                "lies beneath the link or file 'files/l'");
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/a", "a").File("files/a/b", "b").End().Finish(), dst,
                "lies beneath");
}

}  // namespace
}  // namespace capsule::move

namespace capsule::move {
namespace {

// The agent replaced its folder src/ by a file src: the receiver must not keep src/main.py
// beneath the new file.
TEST_F(StreamTest, FileOrLinkArrivingWhereAFolderWasTakesOutWhatWasBeneath) {
  std::string dst = ReceivedCopy();
  Snapshot snapshot = *Snapshot::Load(src_);
  for (const char* path : {"src", "src/main.py", "src/old.py"}) snapshot.Remove(path);
  ASSERT_TRUE(snapshot.Save(src_).ok());
  PutSourceFile("src", "now a file\n");
  PackOptions copy;
  copy.have = *HaveOfCapsule(dst);
  Status status = Unpack(Pack(src_, copy), dst);
  ASSERT_TRUE(status.ok()) << status.ToString();
  Snapshot received = *Snapshot::Load(dst);
  EXPECT_EQ(received.Find("src/main.py"), nullptr);
  EXPECT_EQ(received.Find("src/old.py"), nullptr);
  EXPECT_EQ(*ReadWorkspaceFile(dst, "src"), "now a file\n");
  EXPECT_EQ(received.entries(), Snapshot::Load(src_)->entries());
  // A link arriving where a folder was does the same.
  std::string link = Forge(ManifestText(Phase::kCopy))
                         .Raw([](TarWriter& w) { ASSERT_TRUE(w.AddSymlink("files/src", "README.md").ok()); })
                         .End()
                         .Finish();
  ASSERT_TRUE(Unpack(link, dst).ok());
  EXPECT_EQ(Snapshot::Load(dst)->Find("src")->type, SnapshotEntry::Type::kSymlink);
}

// Before anything is placed, the staged snapshot is checked against the blobs: one the
// capsule held here lost (with its manifest entry), and the stream did not bring, is refused.
TEST_F(StreamTest, RefusesAStagedSnapshotWhoseBlobIsGone) {
  std::string dst = ReceivedCopy();
  std::string sha = Snapshot::Load(dst)->Find("README.md")->sha256;
  Result<Manifest> manifest = Manifest::Load(dst);
  ASSERT_TRUE(manifest.ok());
  manifest->files.erase(BlobPath(sha));
  ASSERT_TRUE(manifest->Save(dst).ok());
  ASSERT_EQ(::unlink((dst + "/" + BlobPath(sha)).c_str()), 0);
  const std::string snapshot_before = *ReadFile(dst + "/" + kSnapshotPath);
  PutSourceFile("src/new.py", "print('new')\n");
  PackOptions copy;
  copy.move_id = std::string(32, 'c');
  copy.have = *HaveOfCapsule(dst);
  Status status = Unpack(Pack(src_, copy), dst);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("files/README.md: blob " + sha + " missing"), std::string::npos) << status.ToString();
  EXPECT_EQ(*ReadFile(dst + "/" + kSnapshotPath), snapshot_before) << "nothing was placed";
}

// An apply to a move's staging area keeps the manifest and snapshot it saved; the next one
// there (the switch after the copy) takes them instead of reading the files again, but only
// while the files on disk are still the ones saved.
TEST_F(StreamTest, AStagingAreaTakesItsSavedDocumentsOnlyWhileTheFilesAreThoseSaved) {
  const std::string move(32, 'c');
  auto apply_stream = [&](const std::string& staging, Phase phase, const HaveMap& have,
                          std::optional<StagedDocuments>* staged) {
    PackOptions pack;
    pack.phase = phase;
    pack.move_id = move;
    pack.have = have;
    StringSource source(Pack(src_, pack));
    ApplyOptions apply;
    apply.sealed = true;
    apply.expected_phase = phase;
    apply.expected_move = move;
    apply.expected_agent = "agent-7";
    apply.holder_machine = "machine-here";
    apply.holder_epoch = 2;
    apply.staged = staged;
    return ApplyStreamToStaging(&source, staging, apply, nullptr);
  };
  for (bool rewritten_on_disk : {false, true}) {
    SCOPED_TRACE(rewritten_on_disk ? "snapshot rewritten on disk" : "files as saved");
    const std::string staging = root_ + (rewritten_on_disk ? "/staging-rewritten" : "/staging-as-saved");
    ASSERT_TRUE(MakeDirectories(staging).ok());
    std::optional<StagedDocuments> staged;
    Status copied = apply_stream(staging, Phase::kCopy, {}, &staged);
    ASSERT_TRUE(copied.ok()) << copied.ToString();
    ASSERT_TRUE(staged.has_value());
    EXPECT_EQ(*staged->manifest.ToCanonicalText(), *ReadFile(staging + "/" + kManifestPath));
    EXPECT_EQ(*staged->snapshot.ToCanonicalText(), *ReadFile(staging + "/" + kSnapshotPath));
    const HaveMap have = *HaveOfCapsule(staging);
    // Another name for a blob the staging area holds, once in memory and once on disk: the
    // switch keeps whichever it started from (the source removes only names in its have).
    const SnapshotEntry readme = *staged->snapshot.Find("README.md");
    staged->snapshot.Set("only-remembered.md", readme);
    if (rewritten_on_disk) {
      Result<Snapshot> on_disk = Snapshot::Load(staging);
      ASSERT_TRUE(on_disk.ok());
      on_disk->Set("only-on-disk.md", readme);
      ASSERT_TRUE(on_disk->Save(staging).ok());
      Result<Manifest> manifest = Manifest::Load(staging);
      ASSERT_TRUE(RefreshManifestEntries(staging, {kSnapshotPath}, &*manifest).ok());
      ASSERT_TRUE(manifest->Save(staging).ok());
    }
    PutSourceFile("src/new.py", "print('new')\n");
    Status switched = apply_stream(staging, Phase::kSwitch, have, &staged);
    ASSERT_TRUE(switched.ok()) << switched.ToString();
    Result<Snapshot> result = Snapshot::Load(staging);
    ASSERT_TRUE(result.ok());
    EXPECT_NE(result->Find("src/new.py"), nullptr);
    EXPECT_EQ(result->Find("only-remembered.md") != nullptr, !rewritten_on_disk);
    EXPECT_EQ(result->Find("only-on-disk.md") != nullptr, rewritten_on_disk);
    Result<VerifyReport> report = VerifyFolder(staging);
    ASSERT_TRUE(report.ok()) << report.status().ToString();
    EXPECT_TRUE(report->ok()) << report->problems.front();
    ASSERT_TRUE(staged.has_value());
    EXPECT_EQ(*staged->snapshot.ToCanonicalText(), *ReadFile(staging + "/" + kSnapshotPath));
  }
}

// A forged stream that puts a file beneath a file or link the capsule holds, without
// replacing it by a folder, is refused.
TEST_F(StreamTest, RefusesEntryBeneathAHeldFileOrLink) {
  std::string dst = ReceivedCopy();
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/README.md/x", "x").End().Finish(), dst,
                "lies beneath the link or file 'README.md'");
  // Deeper, with no entry for the folders between.
  ExpectRefused(Forge(ManifestText(Phase::kCopy)).File("files/src/main.py/deep/z", "z").End().Finish(), dst,
                "lies beneath the link or file 'src/main.py'");
}

}  // namespace
}  // namespace capsule::move
