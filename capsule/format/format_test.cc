// Tests of the capsule format's library: the workspace API, the environment spec check, the
// holder record and the layout's path rules.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "capsule/base/sha256.h"
#include "capsule/format/create.h"
#include "capsule/format/digest_cache.h"
#include "capsule/format/environment_spec.h"
#include "capsule/format/harness.h"
#include "capsule/format/schedule.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/local_files.h"
#include "capsule/format/mount_lock.h"
#include "capsule/format/verify.h"
#include "capsule/format/workspace.h"
#include "capsule/format/workspace_times.h"

#include "capsule/base/temp_dir.h"

namespace capsule {
namespace {

std::string NewCapsule() {
  std::string root = testing::MakeTempDir("format_test");
  CreateOptions options;
  options.agent = {"agent-1", "Agent", std::nullopt};
  EXPECT_TRUE(CreateCapsule(root + "/cap", options).ok());
  return root + "/cap";
}

TEST(WorkspaceTest, PutThenReadBackStoresOnceByContent) {
  std::string cap = NewCapsule();
  std::string src = cap + "/../source.txt";
  ASSERT_TRUE(WriteFileAtomic(src, "workspace body", 0750).ok());
  ASSERT_TRUE(PutWorkspaceFile(cap, "dir/a.txt", src).ok());
  ASSERT_TRUE(PutWorkspaceFile(cap, "b.txt", src).ok());
  EXPECT_EQ(*ReadWorkspaceFile(cap, "dir/a.txt"), "workspace body");
  auto snapshot = Snapshot::Load(cap);
  ASSERT_TRUE(snapshot.ok());
  const SnapshotEntry* entry = snapshot->Find("dir/a.txt");
  ASSERT_NE(entry, nullptr);
  EXPECT_EQ(entry->mode, 0750u);
  EXPECT_EQ(entry->size, 14u);
  EXPECT_EQ(snapshot->Find("b.txt")->sha256, entry->sha256);
  EXPECT_EQ(ListTree(cap + "/artifacts/blobs")->size(), 1u);  // one blob for both
  EXPECT_EQ(ReadWorkspaceFile(cap, "missing").status().code(), Code::kNotFound);
  EXPECT_FALSE(PutWorkspaceFile(cap, "../escape", src).ok());
}

TEST(WorkspaceTest, ReadBackCatchesADamagedBlob) {
  std::string cap = NewCapsule();
  std::string src = cap + "/../s";
  ASSERT_TRUE(WriteFileAtomic(src, "original").ok());
  ASSERT_TRUE(PutWorkspaceFile(cap, "f", src).ok());
  std::string blob = cap + "/" + BlobPath(Snapshot::Load(cap)->Find("f")->sha256);
  ASSERT_TRUE(WriteFileAtomic(blob, "tampered").ok());
  EXPECT_EQ(ReadWorkspaceFile(cap, "f").status().code(), Code::kCorruption);
}

TEST(EnvironmentSpecTest, SecretNamesAreRefusedByName) {
  for (const char* name : {"TOKEN", "KEY", "GITHUB_TOKEN", "api_key", "DB_PASSWORD", "AWS_SECRET", "PASSWORD",
                           "SECRET", "OPENAI_APIKEY", "secret_value", "TOKENS_DIR", "Client_Secret_Id"}) {
    EXPECT_TRUE(IsSecretVariableName(name)) << name;
    std::string spec = std::string(R"({"env":{")") + name + R"(":"v"}})";
    Status status = CheckEnvironmentSpec(spec);
    EXPECT_EQ(status.code(), Code::kInvalidArgument) << name;
    EXPECT_NE(status.message().find(name), std::string::npos) << status.message();
  }
  for (const char* name : {"PATH", "KEYBOARD", "MONKEY", "KEYS_DIR"}) EXPECT_FALSE(IsSecretVariableName(name)) << name;
  // A URL with a password is a secret value whatever the variable is called.
  Status url = CheckEnvironmentSpec(R"({"env":{"DATABASE_URL":"postgres://app:hunter2@db:5432/app"}})");
  EXPECT_EQ(url.code(), Code::kInvalidArgument);
  EXPECT_NE(url.message().find("DATABASE_URL: holds a URL with a password"), std::string::npos) << url.message();
  EXPECT_FALSE(CheckEnvironmentSpec(R"({"services":[{"url":"https://u:p@example.com"}]})").ok());
  EXPECT_TRUE(CheckEnvironmentSpec(R"({"env":{"DATABASE_URL":"postgres://app@db/app","HOME_URL":"https://x.org/a:b@c"}})")
                  .ok());
  EXPECT_TRUE(CheckEnvironmentSpec(R"({"env":{"PATH":"/bin"},"secrets":["OPENAI_API_KEY"]})").ok());
  EXPECT_FALSE(CheckEnvironmentSpec(R"({"services":[{"env":{"X_TOKEN":"t"}}]})").ok());  // at any depth
  EXPECT_FALSE(CheckEnvironmentSpec(R"({"secrets":["sk-live value"]})").ok());
  EXPECT_FALSE(CheckEnvironmentSpec("[1]").ok());
  EXPECT_TRUE(CheckEnvironmentSpec(DefaultEnvironmentSpec()).ok());
}

TEST(HolderTest, NewCapsuleIsHeldAndStatesRefuseWrites) {
  std::string cap = NewCapsule();
  EXPECT_TRUE(CheckHeldForWrite(cap).ok());
  auto record = HolderRecord::Load(cap);
  ASSERT_TRUE(record.ok());
  EXPECT_EQ(record->epoch, 1u);
  EXPECT_EQ(record->machine, *LoadOrCreateMachineId(cap));  // stable across calls
  record->state = HolderState::kFrozen;
  ASSERT_TRUE(record->Save(cap).ok());
  EXPECT_EQ(CheckHeldForWrite(cap).code(), Code::kFailedPrecondition);
  record->state = HolderState::kRetired;
  ASSERT_TRUE(record->Save(cap).ok());
  EXPECT_NE(CheckHeldForWrite(cap).message().find("retired"), std::string::npos);
  ASSERT_EQ(::unlink((cap + "/.capsule/holder.json").c_str()), 0);
  EXPECT_NE(CheckHeldForWrite(cap).message().find("no holder record"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomic(cap + "/.capsule/holder.json", "{garbage").ok());
  EXPECT_EQ(CheckHeldForWrite(cap).code(), Code::kFailedPrecondition);  // fail safe
}

// Every change of the holder record is a compare-and-set from the states the caller expects.
TEST(HolderTest, TransitionsAreCompareAndSetAndAMovesFreezeIsThawedOnlyByThatMove) {
  std::string cap = NewCapsule();
  using S = HolderState;
  auto state = [&] { return HolderRecord::Load(cap)->state; };
  // An admin's freeze, taken over by a move's; another move cannot take it over.
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive}, S::kFrozen, ""}).ok());
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kFrozen, "m1"}).ok());
  EXPECT_EQ(HolderRecord::Load(cap)->move, "m1");
  EXPECT_TRUE(TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kFrozen, "m1"}).ok());  // retried
  Result<HolderRecord> other = TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kFrozen, "m2"});
  EXPECT_EQ(other.status().code(), Code::kFailedPrecondition);
  // Only m1 thaws it; the refusal says what the record says and what to run.
  Result<HolderRecord> admin = TransitionHolder(cap, {{S::kFrozen}, S::kActive, ""});
  EXPECT_EQ(admin.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(admin.status().message().find("frozen at epoch 1 for move m1"), std::string::npos)
      << admin.status().message();
  EXPECT_NE(admin.status().message().find("--recover"), std::string::npos);
  EXPECT_FALSE(TransitionHolder(cap, {{S::kFrozen}, S::kActive, "m2"}).ok());
  EXPECT_EQ(state(), S::kFrozen);
  Result<HolderRecord> thawed = TransitionHolder(cap, {{S::kFrozen}, S::kActive, "m1"});
  ASSERT_TRUE(thawed.ok()) << thawed.status().message();
  EXPECT_EQ(thawed->move, "");
  EXPECT_EQ(HolderRecord::Load(cap)->move, "");
  // A move that takes over an admin's freeze gives it back on rollback: still frozen, for no
  // move, and the admin thaws it.
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive}, S::kFrozen, ""}).ok());
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kFrozen, "m4"}).ok());
  EXPECT_TRUE(HolderRecord::Load(cap)->admin_freeze);
  Result<HolderRecord> given_back = TransitionHolder(cap, {{S::kFrozen}, S::kActive, "m4"});
  ASSERT_TRUE(given_back.ok()) << given_back.status().message();
  EXPECT_EQ(given_back->state, S::kFrozen);
  EXPECT_EQ(HolderRecord::Load(cap)->move, "");
  EXPECT_FALSE(HolderRecord::Load(cap)->admin_freeze);
  ASSERT_TRUE(TransitionHolder(cap, {{S::kFrozen}, S::kActive, ""}).ok());
  EXPECT_EQ(state(), S::kActive);
  // A move's thaw never thaws a freeze it did not make (an admin froze after the move's
  // mover died before its own freeze): the record stays frozen.
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive}, S::kFrozen, ""}).ok());
  Result<HolderRecord> not_its_own = TransitionHolder(cap, {{S::kFrozen}, S::kActive, "m5"});
  ASSERT_TRUE(not_its_own.ok());
  EXPECT_EQ(not_its_own->state, S::kFrozen);
  ASSERT_TRUE(TransitionHolder(cap, {{S::kFrozen}, S::kActive, ""}).ok());
  // A decision for another epoch never changes the record (a late answer about an old move).
  Result<HolderRecord> stale = TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kRetired, ""}, 7);
  EXPECT_EQ(stale.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(stale.status().message().find("meant for epoch 7"), std::string::npos) << stale.status().message();
  EXPECT_EQ(state(), S::kActive);
  // Retired is final: no thaw, no freeze revives it.
  ASSERT_TRUE(TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kRetired, ""}).ok());
  EXPECT_FALSE(TransitionHolder(cap, {{S::kFrozen}, S::kActive, ""}).ok());
  EXPECT_FALSE(TransitionHolder(cap, {{S::kActive, S::kFrozen}, S::kFrozen, "m3"}).ok());
  EXPECT_EQ(state(), S::kRetired);
  EXPECT_EQ(HolderRecord::Load(cap)->epoch, 1u);
  // No record: nothing to change, and nothing made.
  ASSERT_EQ(::unlink((cap + "/.capsule/holder.json").c_str()), 0);
  EXPECT_EQ(TransitionHolder(cap, {{S::kRetired}, S::kActive, ""}).status().code(), Code::kFailedPrecondition);
  EXPECT_FALSE(PathExists(cap + "/.capsule/holder.json"));
}

// Racing freezes for different moves: the lock makes exactly one of them win.
TEST(HolderTest, ConcurrentTransitionsNeverBothWin) {
  for (int round = 0; round < 20; ++round) {
    std::string cap = NewCapsule();
    std::atomic<int> won{0};
    std::vector<std::thread> racers;
    for (int i = 0; i < 8; ++i) {
      racers.emplace_back([&, i] {
        HolderTransition freeze{{HolderState::kActive}, HolderState::kFrozen, "move-" + std::to_string(i)};
        if (TransitionHolder(cap, freeze).ok()) ++won;
      });
    }
    for (std::thread& racer : racers) racer.join();
    EXPECT_EQ(won.load(), 1) << "round " << round;
  }
}

// A write checked under HoldForWrite lands before a freeze or not at all: the freeze waits
// for the hold to close, and a check after the freeze refuses.
TEST(HolderTest, FreezeWaitsForAWriteAlreadyChecked) {
  std::string cap = NewCapsule();
  Result<UniqueFd> held = HoldForWrite(cap);
  ASSERT_TRUE(held.ok()) << held.status().ToString();
  std::atomic<bool> frozen{false};
  std::atomic<pid_t> freezer_tid{0};
  std::atomic<bool> returned{false};
  std::thread freezer([&] {
    freezer_tid = static_cast<pid_t>(::syscall(SYS_gettid));
    HolderTransition freeze{{HolderState::kActive}, HolderState::kFrozen, "move-1"};
    frozen = TransitionHolder(cap, freeze).ok();
    returned = true;
  });
  // The freeze is seen blocked inside flock(2) (its thread's current system call), or it
  // returned: it is then known whether it waited, not guessed from a pause.
  auto in_flock = [&] {
    if (freezer_tid == 0) return false;
    Result<std::string> call = ReadFile("/proc/self/task/" + std::to_string(freezer_tid) + "/syscall");
    return call.ok() && call->rfind(std::to_string(SYS_flock) + " ", 0) == 0;
  };
  for (int i = 0; i < 3000 && !in_flock() && !returned; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(in_flock()) << "the freeze should wait for the hold, inside flock(2)";
  EXPECT_FALSE(frozen.load()) << "a freeze ran while a checked write was in flight";
  EXPECT_EQ(HolderRecord::Load(cap)->state, HolderState::kActive);
  held->Reset();
  freezer.join();
  EXPECT_TRUE(frozen.load());
  Result<UniqueFd> after = HoldForWrite(cap);
  EXPECT_EQ(after.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(after.status().message().find("frozen"), std::string::npos) << after.status().ToString();
}

// Hard links and metadata-only entries in the snapshot: they round-trip, and a link group
// whose names disagree, a linked folder, a device without its number are refused by name.
TEST(SnapshotTest, LinkGroupsAndSpecialEntries) {
  std::string sha = Sha256Hex("x");
  std::string good = "{\"a\":{\"link\":3,\"mode\":420,\"sha256\":\"" + sha + "\",\"size\":1},"
                     "\"b\":{\"link\":3,\"mode\":420,\"sha256\":\"" + sha + "\",\"size\":1},"
                     "\"d\":{\"mode\":432,\"rdev\":259,\"type\":\"chr\"},"
                     "\"p\":{\"mode\":384,\"type\":\"fifo\"},\"s\":{\"mode\":493,\"type\":\"socket\"}}";
  Result<Snapshot> parsed = Snapshot::Parse(good);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->Find("b")->link, 3u);
  EXPECT_EQ(parsed->Find("d")->type, SnapshotEntry::Type::kCharDevice);
  EXPECT_EQ(parsed->Find("d")->rdev, 259u);
  EXPECT_EQ(parsed->Find("s")->type, SnapshotEntry::Type::kSocket);
  EXPECT_EQ(*parsed->ToCanonicalText(), good);
  struct Case {
    std::string text, why;
  };
  for (const Case& c : std::vector<Case>{
           {"{\"a\":{\"link\":1,\"mode\":420,\"sha256\":\"" + sha + "\",\"size\":1},"
            "\"b\":{\"link\":1,\"mode\":384,\"sha256\":\"" + sha + "\",\"size\":1}}",
            "differs from 'a'"},
           {"{\"d\":{\"link\":1,\"mode\":493,\"type\":\"dir\"}}", "a folder cannot be a hard link"},
           {"{\"a\":{\"link\":0,\"mode\":420,\"sha256\":\"" + sha + "\",\"size\":1}}", "positive link group"},
           {"{\"d\":{\"mode\":432,\"type\":\"blk\"}}", "a device needs rdev"},
           {"{\"d\":{\"mode\":432,\"type\":7}}", "type is not a string"},
       }) {
    Result<Snapshot> bad = Snapshot::Parse(c.text);
    ASSERT_FALSE(bad.ok()) << c.text;
    EXPECT_NE(bad.status().message().find(c.why), std::string::npos) << bad.status().ToString();
  }
}

// The manifest, the snapshot and the workspace times are written key by key (CanonicalWriter),
// not through a Json document: for every kind of entry, optional field and name (plain, needing an escape, not
// ASCII) the text is byte for byte what CanonicalJson makes, and reads back to the same.
TEST(SnapshotTest, FastCanonicalTextIsCanonicalJson) {
  std::mt19937 random(20261203);
  const std::vector<std::string> names = {"a.txt", "dir/b", "sp ace", "q\"uote", "back\\slash", "tab\there",
                                          "caf\xc3\xa9", "\xe2\x9c\x93/x", "z~", "~"};
  for (int round = 0; round < 300; ++round) {
    Snapshot snapshot;
    Manifest manifest;
    manifest.agent.id = "agent-" + std::to_string(round);
    manifest.agent.name = round % 7 == 0 ? "Ag\xc3\xa9nt" : "Agent";
    if (round % 3 == 0) manifest.agent.owner = round % 2 ? "o\"wner" : "owner";
    manifest.holder_machine = "m-" + std::to_string(round);
    manifest.holder_epoch = random() % 100000;
    const int count = random() % 6;
    for (int i = 0; i < count; ++i) {
      SnapshotEntry entry;
      entry.type = static_cast<SnapshotEntry::Type>(random() % 7);
      entry.mode = random() % 07777;
      if (entry.type == SnapshotEntry::Type::kFile) {
        entry.sha256 = Sha256Hex(std::to_string(random()));
        entry.size = random();
      }
      if (entry.type == SnapshotEntry::Type::kSymlink) entry.target = names[random() % names.size()];
      if (entry.type == SnapshotEntry::Type::kCharDevice || entry.type == SnapshotEntry::Type::kBlockDevice) {
        entry.rdev = random();
      }
      if (random() % 3 == 0) entry.uid = random() % 70000;
      if (random() % 3 == 0) entry.gid = random() % 70000;
      if (entry.type != SnapshotEntry::Type::kDirectory && random() % 4 == 0) entry.link = 1 + random() % 2;
      std::string path = names[random() % names.size()] + std::to_string(i);
      snapshot.Set(path, entry);
      manifest.files["artifacts/blobs/" + Sha256Hex(path)] = FileDigest{Sha256Hex(path + "!"), entry.size};
      if (random() % 4 == 0) manifest.files[path] = FileDigest{Sha256Hex(path), uint64_t(random())};
    }
    Result<std::string> fast = snapshot.ToCanonicalText();
    Result<std::string> general = snapshot.ToCanonicalTextThroughJson();
    ASSERT_TRUE(fast.ok() && general.ok());
    EXPECT_EQ(*fast, *general);
    EXPECT_TRUE(IsCanonicalJson(*fast)) << *fast;
    WorkspaceTimes times;
    for (const auto& [path, entry] : snapshot.entries()) {
      times[path] = timespec{static_cast<time_t>(random()) - (round % 5 == 0 ? 4000000000 : 0),
                             static_cast<long>(random() % 1000000000)};
    }
    Result<std::string> times_text = WorkspaceTimesText(times);
    Result<std::string> times_general = CanonicalJson(WorkspaceTimesJson(times));
    ASSERT_TRUE(times_text.ok() && times_general.ok());
    EXPECT_EQ(*times_text, *times_general);
    Result<std::string> manifest_text = manifest.ToCanonicalText();
    ASSERT_TRUE(manifest_text.ok());
    Result<std::string> manifest_general = CanonicalJson(manifest.ToJson());
    ASSERT_TRUE(manifest_general.ok());
    EXPECT_EQ(*manifest_text, *manifest_general);
    Result<Manifest> back = Manifest::Parse(*manifest_text);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_EQ(back->ToJson(), manifest.ToJson());
    // The fast reader of canonical text and the general one agree on every text: the
    // manifest as written, and each of a few damaged copies (a byte changed, cut, doubled).
    auto with_damaged_copies = [&random](const std::string& text, int copies) {
      std::vector<std::string> texts = {text};
      for (int k = 0; k < copies; ++k) {
        std::string damaged = text;
        size_t at = random() % damaged.size();
        switch (k % 3) {
          case 0: damaged[at] = "0a\"{}:,\\9 "[random() % 11]; break;
          case 1: damaged.resize(at); break;
          case 2: damaged.insert(at, damaged.substr(at, 1 + random() % 12)); break;
        }
        texts.push_back(damaged);
      }
      return texts;
    };
    // Both readers of each text: the same answer, or the same refusal.
    auto expect_readers_agree = [](const std::string& text, auto parse, auto parse_general, auto comparable) {
      auto either = parse(text);
      auto general = parse_general(text);
      ASSERT_EQ(either.ok(), general.ok()) << text;
      if (either.ok()) {
        EXPECT_EQ(comparable(*either), comparable(*general)) << text;
      } else {
        EXPECT_EQ(either.status().ToString(), general.status().ToString());
      }
    };
    for (const std::string& text : with_damaged_copies(*manifest_text, 6)) {
      expect_readers_agree(text, Manifest::Parse, Manifest::ParseThroughJson, [](const Manifest& m) { return m.ToJson(); });
    }
    // The same for the snapshot's two readers; the fast one reads every text it wrote with
    // no string to escape.
    bool plain = true;
    for (const auto& [path, entry] : snapshot.entries()) {
      for (char c : path + entry.target) plain = plain && c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
    }
    EXPECT_EQ(Snapshot::ParseCanonical(*fast).has_value(), plain) << *fast;
    for (const std::string& text : with_damaged_copies(*fast, 9)) {
      expect_readers_agree(text, Snapshot::Parse, Snapshot::ParseThroughJson,
                           [](const Snapshot& snapshot) { return snapshot.entries(); });
    }
  }
}

// Right after `fusermount3 -u`, a daemon's control socket is still there while it writes its
// last checkpoint: a command waits for it, because its recorded mountpoint is no longer
// mounted; with no mountpoint recorded it trusts the socket, as before.
TEST(MountLockTest, AWaitSeesADriverThatIsNoLongerMountedAsFinishing) {
  std::string cap = NewCapsule();
  Result<UniqueFd> lock = LockForMount(cap);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  ASSERT_TRUE(lock->valid());
  ASSERT_TRUE(WriteFileAtomic(JoinPath(cap, local::kControlSocket), "").ok());  // stands in for the socket
  EXPECT_TRUE(WaitForUnmountToFinish(cap, std::chrono::milliseconds(200)).ok()) << "nothing recorded: serving";
  std::string plain = cap + "/not-a-mount";
  ASSERT_TRUE(MakeDirectories(plain).ok());
  ASSERT_TRUE(RecordMountpoint(lock->get(), plain).ok());
  EXPECT_EQ(*ReadFile(JoinPath(cap, local::kMountLock)), RealPath(plain));
  Status waited = WaitForUnmountToFinish(cap, std::chrono::milliseconds(200));
  EXPECT_EQ(waited.code(), Code::kUnavailable) << waited.ToString();
  lock->Reset();
  EXPECT_TRUE(WaitForUnmountToFinish(cap, std::chrono::milliseconds(200)).ok()) << "the driver let go";
}

TEST(LayoutTest, PlainRelativePaths) {
  for (const char* good : {"a", "a/b", "files/x.txt", "..a", "a..b"}) EXPECT_TRUE(IsPlainRelativePath(good)) << good;
  for (const char* bad : {"", "/a", "a/../b", "..", ".", "a//b", "a/", "./a"}) {
    EXPECT_FALSE(IsPlainRelativePath(bad)) << bad;
  }
  EXPECT_FALSE(IsPlainRelativePath(std::string("a\0b", 3)));
  EXPECT_TRUE(IsBlobPath("artifacts/blobs/" + std::string(64, 'a')));
  EXPECT_FALSE(IsBlobPath("artifacts/blobs/" + std::string(63, 'a')));
  EXPECT_TRUE(IsTempDebris("x/.tmp-file.123"));
  EXPECT_FALSE(CheckAgentId("a/b").ok());
  EXPECT_TRUE(CheckAgentId("agent_1.v2-x").ok());
}

TEST(VerifyTest, JournalPrefixRuleAllowsAppendsAndCatchesEdits) {
  std::string cap = NewCapsule();
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kJournalPath, "line one\n").ok());
  auto manifest = Manifest::Load(cap);
  ASSERT_TRUE(RefreshManifestEntries(cap, {kJournalPath}, &*manifest).ok());
  ASSERT_TRUE(manifest->Save(cap).ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kJournalPath, "line one\nline two\n").ok());
  EXPECT_TRUE(VerifyFolder(cap)->ok());  // appended: the manifest's prefix still holds
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kJournalPath, "line One\nline two\n").ok());
  auto edited = VerifyFolder(cap);
  ASSERT_EQ(edited->problems.size(), 1u);
  EXPECT_NE(edited->problems[0].find("digest mismatch"), std::string::npos);
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kJournalPath, "line").ok());
  EXPECT_NE(VerifyFolder(cap)->problems[0].find("truncated"), std::string::npos);
}


// A document too large to read whole is reported, never passed over; the journal is checked
// whatever its size (a 334 MB journal once went unchecked by capsule verify).
TEST(VerifyTest, LargeDocumentsAreReportedAndTheJournalIsAlwaysChecked) {
  std::string cap = NewCapsule();
  const std::string journal(4096, 'j');
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kJournalPath, journal).ok());
  auto manifest = Manifest::Load(cap);
  ASSERT_TRUE(RefreshManifestEntries(cap, {kJournalPath}, &*manifest).ok());
  ASSERT_TRUE(manifest->Save(cap).ok());
  size_t checked_bytes = 0;
  VerifyOptions options;
  options.check_journal = [&](const ReadAtFunction& read) {
    checked_bytes = ReadAll(read)->size();
    return std::vector<std::string>{};
  };
  options.max_document_size = 16;  // smaller than the journal and the spec
  auto report = VerifyFolder(cap, options);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(checked_bytes, journal.size());
  bool spec_reported = false;
  for (const std::string& problem : report->problems) {
    EXPECT_EQ(problem.find(kJournalPath), std::string::npos) << problem;
    spec_reported = spec_reported || (problem.rfind(std::string(kEnvironmentSpecPath) + ": too large to check", 0) == 0);
  }
  EXPECT_TRUE(spec_reported);
  options.max_document_size = 256ull << 20;
  checked_bytes = 0;
  EXPECT_TRUE(VerifyFolder(cap, options)->ok());
  EXPECT_EQ(checked_bytes, journal.size());
}

// Rewrites `path` in place with `body` (same inode), after a pause long enough for the
// file system's clock to show a new modification time.
void RewriteInPlace(const std::string& path, const std::string& body) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pwrite(fd, body.data(), body.size(), 0), static_cast<ssize_t>(body.size()));
  ::close(fd);
}

TEST(DigestCacheTest, RemembersUnchangedFilesAndReadsChangedOnesAgain) {
  std::string root = testing::MakeTempDir("digest_cache");
  std::string path = root + "/f";
  ASSERT_TRUE(WriteFileAtomic(path, "first").ok());
  DigestCache cache;
  uint64_t size = 0;
  EXPECT_EQ(*cache.Sha256File(path, &size), *Sha256File(path));
  EXPECT_EQ(size, 5u);
  EXPECT_EQ(cache.files_read(), 1u);
  EXPECT_EQ(*cache.Sha256File(path, &size), *Sha256File(path));
  EXPECT_EQ(cache.files_read(), 1u) << "an unchanged file is answered from memory";

  ASSERT_TRUE(WriteFileAtomic(path, "other").ok());  // a new inode, same size
  EXPECT_EQ(*cache.Sha256File(path, nullptr), *Sha256File(path));
  EXPECT_EQ(cache.files_read(), 2u);

  RewriteInPlace(path, "OTHER");  // same inode and size, new times
  EXPECT_EQ(*cache.Sha256File(path, nullptr), *Sha256File(path));
  EXPECT_EQ(cache.files_read(), 3u);

  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_FALSE(cache.Sha256File(path, nullptr).ok());
}

TEST(DigestCacheTest, AGrowingFileIsHashedFromWhereItWasLeft) {
  std::string root = testing::MakeTempDir("digest_growing");
  std::string path = root + "/journal";
  std::string text = std::string(10000, 'a') + "\n";
  ASSERT_TRUE(WriteFileAtomic(path, text).ok());
  DigestCache cache;
  uint64_t size = 0;
  std::string prefix;
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, &size), Sha256Hex(text));
  EXPECT_EQ(size, text.size());
  EXPECT_EQ(cache.growing_bytes_read(), text.size());

  auto append = [&](const std::string& more) {
    int fd = ::open(path.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::write(fd, more.data(), more.size()), static_cast<ssize_t>(more.size()));
    ::close(fd);
    text += more;
  };
  append("second line\n");
  const uint64_t first_size = 10001;
  EXPECT_EQ(*cache.Sha256GrowingFile(path, first_size, &prefix, &size), Sha256Hex(text));
  EXPECT_EQ(prefix, Sha256Hex(text.substr(0, first_size)));
  EXPECT_EQ(size, text.size());
  EXPECT_EQ(cache.growing_bytes_read(), first_size + 12) << "only the appended line was read";

  // A prefix past what was hashed is found on the way; one short of it needs a whole read.
  append("third\n");
  EXPECT_EQ(*cache.Sha256GrowingFile(path, text.size() - 3, &prefix, nullptr), Sha256Hex(text));
  EXPECT_EQ(prefix, Sha256Hex(text.substr(0, text.size() - 3)));
  EXPECT_EQ(cache.growing_bytes_read(), first_size + 12 + 6);
  EXPECT_EQ(*cache.Sha256GrowingFile(path, 5, &prefix, nullptr), Sha256Hex(text));
  EXPECT_EQ(prefix, Sha256Hex(text.substr(0, 5)));
  EXPECT_EQ(cache.growing_bytes_read(), first_size + 12 + 6 + text.size());

  // Rewritten in place near its end, then grown: the tail no longer matches, read whole.
  uint64_t read = cache.growing_bytes_read();
  RewriteInPlace(path, std::string(text.size(), 'b'));
  text = std::string(text.size(), 'b');
  append("more\n");
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, nullptr), Sha256Hex(text));
  read += text.size();
  EXPECT_EQ(cache.growing_bytes_read(), read);
  // Replaced by another file (a merge writes a new one): read whole, though it is longer.
  text += "and a line the other copy had\n";
  ASSERT_TRUE(WriteFileAtomic(path, text).ok());
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, nullptr), Sha256Hex(text));
  read += text.size();
  EXPECT_EQ(cache.growing_bytes_read(), read);
  // Shorter than what was hashed: read whole.
  text = "short\n";
  RewriteInPlace(path, text);
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(text.size())), 0);
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, nullptr), Sha256Hex(text));
  read += text.size();
  EXPECT_EQ(cache.growing_bytes_read(), read);
  // A torn last line is not where a state is kept: cut and written again, the file is still
  // hashed right (from the last state that ended a line).
  append(std::string(6000, 't'));
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, nullptr), Sha256Hex(text));
  read += 6000;
  ASSERT_EQ(::truncate(path.c_str(), 6), 0);
  text = "short\n";
  append(std::string(7000, 'u') + "\n");
  EXPECT_EQ(*cache.Sha256GrowingFile(path, UINT64_MAX, nullptr, nullptr), Sha256Hex(text));
  EXPECT_EQ(cache.growing_bytes_read(), read + 7001) << "read from the last line's end";
}

// A capsule made under `root` from a workspace holding `files` (name -> content); its path.
std::string CapsuleOfFiles(const std::string& root, const std::map<std::string, std::string>& files) {
  EXPECT_TRUE(MakeDirectories(root + "/ws").ok());
  for (const auto& [name, content] : files) EXPECT_TRUE(WriteFileAtomic(root + "/ws/" + name, content).ok());
  CreateOptions create;
  create.agent = {"agent-1", "Agent", std::nullopt};
  create.workspace_source = root + "/ws";
  std::string cap = root + "/cap";
  EXPECT_TRUE(CreateCapsule(cap, create).ok());
  return cap;
}

TEST(VerifyTest, RememberedBlobDigestsStillCatchADamagedBlob) {
  std::string cap = CapsuleOfFiles(testing::MakeTempDir("verify_cached"), {{"f", "original"}});
  DigestCache cache;
  VerifyOptions options;
  options.blob_digests = &cache;
  ASSERT_TRUE(VerifyFolder(cap, options)->ok());
  EXPECT_EQ(cache.files_read(), 1u) << "only blobs go through the cache";
  ASSERT_TRUE(VerifyFolder(cap, options)->ok());
  EXPECT_EQ(cache.files_read(), 1u);

  std::string blob = cap + "/" + BlobPath(Snapshot::Load(cap)->Find("f")->sha256);
  RewriteInPlace(blob, "damaged!");
  Result<VerifyReport> report = VerifyFolder(cap, options);
  ASSERT_TRUE(report.ok());
  ASSERT_FALSE(report->ok());
  EXPECT_NE(report->problems[0].find("does not match its name"), std::string::npos) << report->problems[0];
}

// A mount's freeze right after its preverify: the blobs the cache remembers are taken as they
// were (not even a stat), the blobs folder is listed by name, and everything else is checked.
TEST(VerifyTest, TrustedRememberedBlobsAreNotLookedAtButEverythingElseIs) {
  std::string root = testing::MakeTempDir("verify_trusted");
  std::string cap = CapsuleOfFiles(root, {{"f", "original"}, {"g", "second"}});
  DigestCache cache;
  VerifyOptions options;
  options.blob_digests = &cache;
  options.trust_remembered_blobs = true;
  Result<VerifyReport> first = VerifyFolder(cap, options);
  ASSERT_TRUE(first.ok() && first->ok()) << (first.ok() ? first->problems[0] : first.status().message());
  EXPECT_EQ(cache.files_read(), 2u) << "blobs not remembered are read (and remembered)";
  EXPECT_EQ(first->files_checked, VerifyFolder(cap)->files_checked);

  // Damage a remembered blob in place: the trusting verify does not look, the ordinary one does.
  std::string blob = cap + "/" + BlobPath(Sha256Hex("original"));
  RewriteInPlace(blob, "damaged!");
  Result<VerifyReport> trusting = VerifyFolder(cap, options);
  ASSERT_TRUE(trusting.ok());
  EXPECT_TRUE(trusting->ok()) << trusting->problems[0];
  EXPECT_EQ(cache.files_read(), 2u);
  options.trust_remembered_blobs = false;
  Result<VerifyReport> looking = VerifyFolder(cap, options);
  ASSERT_TRUE(looking.ok());
  ASSERT_FALSE(looking->ok());
  EXPECT_NE(looking->problems[0].find("does not match its name"), std::string::npos) << looking->problems[0];
  RewriteInPlace(blob, "original");
  ASSERT_TRUE(VerifyFolder(cap, options)->ok()) << "read again, and remembered whole again";
  EXPECT_EQ(cache.files_read(), 4u);
  options.trust_remembered_blobs = true;

  // What the cache does not remember is found as ever: an extra blob, damaged, not in the
  // manifest; a folder among the blobs; a missing blob.
  std::string extra = BlobPath(Sha256Hex("extra"));
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + extra, "EXTRA").ok());
  ASSERT_TRUE(MakeDirectories(cap + "/" + std::string(kBlobsDir) + "/stray").ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + std::string(kBlobsDir) + "/stray/inside", "x").ok());
  ASSERT_EQ(::symlink("elsewhere", (cap + "/" + std::string(kBlobsDir) + "/link").c_str()), 0);
  std::string gone = BlobPath(Sha256Hex("second"));
  ASSERT_EQ(::rename((cap + "/" + gone).c_str(), (root + "/kept").c_str()), 0);
  Result<VerifyReport> report = VerifyFolder(cap, options);
  ASSERT_TRUE(report.ok());
  std::string all;
  for (const std::string& problem : report->problems) all += problem + "\n";
  EXPECT_NE(all.find(extra + ": not in manifest"), std::string::npos) << all;
  EXPECT_NE(all.find(extra + ": blob digest does not match its name"), std::string::npos) << all;
  EXPECT_NE(all.find(std::string(kBlobsDir) + "/stray/inside: not in manifest"), std::string::npos) << all;
  EXPECT_NE(all.find(std::string(kBlobsDir) + "/link: not a regular file"), std::string::npos) << all;
  EXPECT_NE(all.find(gone + ": missing"), std::string::npos) << all;
  // Found as a verify that looks at every blob finds them, in the same order.
  options.trust_remembered_blobs = false;
  Result<VerifyReport> looking_at_all = VerifyFolder(cap, options);
  ASSERT_TRUE(looking_at_all.ok());
  EXPECT_EQ(report->problems, looking_at_all->problems);
  options.trust_remembered_blobs = true;

  // A blobs "folder" that is a link is judged as any verify judges it, not followed.
  std::string blobs = cap + "/" + std::string(kBlobsDir);
  ASSERT_EQ(::rename(blobs.c_str(), (root + "/real-blobs").c_str()), 0);
  ASSERT_EQ(::symlink((root + "/real-blobs").c_str(), blobs.c_str()), 0);
  Result<VerifyReport> linked = VerifyFolder(cap, options);
  options.trust_remembered_blobs = false;
  Result<VerifyReport> linked_looking = VerifyFolder(cap, options);
  ASSERT_TRUE(linked.ok() && linked_looking.ok());
  EXPECT_FALSE(linked->ok());
  EXPECT_EQ(linked->problems, linked_looking->problems);
  options.trust_remembered_blobs = true;
  EXPECT_EQ(cache.files_read(), 5u) << "only the extra blob was read (the other verify remembered it)";
}

// A capsule of three files whose blobs `cache` remembers (a verify read them all), with
// options that trust it: as a mount's freeze right after its preverify has them.
struct RememberedCapsule {
  explicit RememberedCapsule(const std::string& name)
      : root(testing::MakeTempDir(name)),
        cap(CapsuleOfFiles(root, {{"f", "first"}, {"g", "second"}, {"h", "third"}})) {
    options.blob_digests = &cache;
    options.trust_remembered_blobs = true;
    verified = VerifyFolder(cap, options).ok();
  }
  std::string root, cap;
  DigestCache cache;
  VerifyOptions options;
  bool verified = false;
};

// A mount's freeze checks the capsule it has just saved without parsing its manifest and
// snapshot again: whatever is on disk, it must report what VerifyFolder reports.
TEST(VerifyTest, ASavedFolderIsJudgedAsVerifyFolderJudgesIt) {
  RememberedCapsule remembered("verify_saved");
  ASSERT_TRUE(remembered.verified);
  const std::string& root = remembered.root;
  const std::string& cap = remembered.cap;
  VerifyOptions& options = remembered.options;
  // Saves `snapshot` and the manifest that lists it, as a mount's checkpoint does.
  SavedCapsule saved;
  auto save = [&](const Snapshot& snapshot) {
    saved.snapshot = snapshot;
    ASSERT_TRUE(saved.snapshot.Save(cap).ok());
    saved.snapshot_sha256 = *Sha256File(cap + "/" + kSnapshotPath, nullptr);
    Result<Manifest> manifest = Manifest::Load(cap);
    ASSERT_TRUE(manifest.ok());
    ASSERT_TRUE(RefreshManifestEntries(cap, {kSnapshotPath}, &*manifest).ok());
    ASSERT_TRUE(manifest->Save(cap).ok());
    saved.manifest_sha256 = *Sha256File(cap + "/" + kManifestPath, nullptr);
    saved.manifest = std::make_shared<const Manifest>(*manifest);
  };
  // Both verifies, compared; `fast`: the saved texts were not read back (no manifest is set);
  // `fast_reading`: nor were they without remembered digests to trust.
  auto judged = [&](bool fast, std::optional<bool> fast_reading = std::nullopt) -> std::vector<std::string> {
    Result<VerifyReport> quick = VerifySavedFolder(cap, saved, options);
    Result<VerifyReport> full = VerifyFolder(cap, options);
    EXPECT_TRUE(quick.ok() && full.ok());
    if (!quick.ok() || !full.ok()) return {"error"};
    EXPECT_EQ(quick->problems, full->problems);
    // The same with the blobs folder listed beforehand, as a checkpoint lists it.
    Result<ListedBlobs> listed = ListBlobsToVerify(cap, options);
    EXPECT_TRUE(listed.ok());
    if (!listed.ok()) return {"error"};
    saved.blobs = std::move(listed).value();
    Result<VerifyReport> quick_listed = VerifySavedFolder(cap, saved, options);
    saved.blobs.reset();
    EXPECT_TRUE(quick_listed.ok());
    if (!quick_listed.ok()) return {"error"};
    EXPECT_EQ(quick_listed->problems, full->problems);
    EXPECT_EQ(quick->files_checked, full->files_checked);
    EXPECT_EQ(!quick->manifest.has_value(), fast);
    // Without remembered digests to trust (a mount's first freeze): every blob is read, the
    // saved texts are still not read back.
    VerifyOptions untrusted = options;
    untrusted.trust_remembered_blobs = false;
    Result<VerifyReport> quick_reading = VerifySavedFolder(cap, saved, untrusted);
    Result<VerifyReport> full_reading = VerifyFolder(cap, untrusted);
    EXPECT_TRUE(quick_reading.ok() && full_reading.ok());
    if (!quick_reading.ok() || !full_reading.ok()) return {"error"};
    EXPECT_EQ(quick_reading->problems, full_reading->problems);
    EXPECT_EQ(quick_reading->problems, full->problems);
    EXPECT_EQ(quick_reading->files_checked, full_reading->files_checked);
    EXPECT_EQ(!quick_reading->manifest.has_value(), fast_reading.value_or(fast));
    return quick->problems;
  };
  auto has = [](const std::vector<std::string>& problems, const std::string& text) {
    for (const std::string& problem : problems) {
      if (problem.find(text) != std::string::npos) return true;
    }
    return false;
  };
  Snapshot snapshot = *Snapshot::Load(cap);
  save(snapshot);
  EXPECT_TRUE(judged(true).empty());

  // A blob the snapshot no longer names; a file whose size differs from its blob's; a file
  // whose blob is not there.
  Snapshot changed = snapshot;
  changed.Remove("h");
  SnapshotEntry f = *changed.Find("f");
  f.size += 1;
  changed.Set("f", f);
  SnapshotEntry nowhere = f;
  nowhere.sha256 = Sha256Hex("nowhere");
  changed.Set("nowhere", nowhere);
  save(changed);
  std::vector<std::string> problems = judged(true);
  EXPECT_TRUE(has(problems, BlobPath(Sha256Hex("third")) + ": unreferenced blob")) << problems.size();
  EXPECT_TRUE(has(problems, "files/f: size differs from its blob"));
  EXPECT_TRUE(has(problems, "files/nowhere: blob " + Sha256Hex("nowhere") + " missing"));
  // A hard-link group whose names disagree: refused as Snapshot::Parse refuses it.
  Snapshot linked = snapshot;
  SnapshotEntry f_named = *linked.Find("f"), g_named = *linked.Find("g");
  f_named.link = g_named.link = 7;
  linked.Set("f", f_named);
  linked.Set("g", g_named);
  save(linked);
  EXPECT_TRUE(has(judged(true), "hard link 7 differs"));
  save(snapshot);
  ASSERT_TRUE(judged(true).empty());

  // Blobs missing, extra (and misnamed), debris; another file damaged.
  std::string second = BlobPath(Sha256Hex("second"));
  ASSERT_EQ(::rename((cap + "/" + second).c_str(), (root + "/kept").c_str()), 0);
  std::string extra = BlobPath(Sha256Hex("extra"));
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + extra, "EXTRA").ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + std::string(kBlobsDir) + "/.tmp-debris", "x").ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + std::string(kWorkingMemoryPath), "edited behind its back").ok());
  problems = judged(true);
  EXPECT_TRUE(has(problems, second + ": missing"));
  EXPECT_TRUE(has(problems, "files/g: blob " + Sha256Hex("second") + " missing"));
  EXPECT_TRUE(has(problems, extra + ": not in manifest"));
  EXPECT_TRUE(has(problems, extra + ": blob digest does not match its name"));
  EXPECT_TRUE(has(problems, std::string(kWorkingMemoryPath) + ": "));
  EXPECT_FALSE(has(problems, "debris"));

  // Not as saved: judged by VerifyFolder itself. A folder among the blobs; another manifest;
  // another snapshot.
  ASSERT_TRUE(MakeDirectories(cap + "/" + std::string(kBlobsDir) + "/stray").ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + std::string(kBlobsDir) + "/stray/inside", "x").ok());
  // (Without trust, the blobs folder is listed whole anyway: still taken as saved.)
  EXPECT_TRUE(has(judged(false, true), std::string(kBlobsDir) + "/stray/inside: not in manifest"));
  ASSERT_TRUE(RemoveTree(cap + "/" + std::string(kBlobsDir) + "/stray").ok());
  Manifest other = *saved.manifest;
  other.holder_epoch += 1;
  ASSERT_TRUE(other.Save(cap).ok());
  judged(false);
  ASSERT_TRUE(saved.manifest->Save(cap).ok());
  judged(true);
  ASSERT_TRUE(changed.Save(cap).ok());
  EXPECT_TRUE(has(judged(false), std::string(kSnapshotPath) + ": size mismatch"));
}

// A freeze's checkpoint lists the blobs folder while it saves, then removes the blobs its
// snapshot no longer names: the verify judges that listing, with those blobs taken out.
TEST(VerifyTest, ASavedFolderIsJudgedByTheBlobsListedWhileSaving) {
  RememberedCapsule remembered("verify_listed");
  ASSERT_TRUE(remembered.verified);
  const std::string& cap = remembered.cap;
  VerifyOptions& options = remembered.options;
  Result<ListedBlobs> listed = ListBlobsToVerify(cap, options);
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->names.size(), 3u);
  ASSERT_EQ(listed->remembered.size(), 3u);

  // The checkpoint: "f" gone from the snapshot, its blob from the manifest, then the disk
  // (its digest sorts between the other two: the listing closes up behind it).
  ASSERT_LT(Sha256Hex("second"), Sha256Hex("first"));
  ASSERT_LT(Sha256Hex("first"), Sha256Hex("third"));
  Snapshot snapshot = *Snapshot::Load(cap);
  snapshot.Remove("f");
  ASSERT_TRUE(snapshot.Save(cap).ok());
  Manifest manifest = *Manifest::Load(cap);
  std::vector<std::string> unreferenced = UnreferencedBlobsOf(manifest, snapshot);
  ASSERT_EQ(unreferenced, std::vector<std::string>{BlobPath(Sha256Hex("first"))});
  for (const std::string& blob : unreferenced) manifest.files.erase(blob);
  ASSERT_TRUE(RefreshManifestEntries(cap, {kSnapshotPath}, &manifest).ok());
  ASSERT_TRUE(manifest.Save(cap).ok());
  ASSERT_TRUE(RemoveBlobs(cap, unreferenced).ok());
  SavedCapsule saved{std::make_shared<const Manifest>(manifest), *Sha256File(cap + "/" + kManifestPath, nullptr),
                     snapshot, *Sha256File(cap + "/" + kSnapshotPath, nullptr), *listed};

  // The listing is what is judged: as taken, it still holds the removed blob, which is then
  // what VerifyFolder would say of that blob on disk.
  Result<VerifyReport> stale = VerifySavedFolder(cap, saved, options);
  ASSERT_TRUE(stale.ok());
  ASSERT_EQ(stale->problems.size(), 2u);
  EXPECT_EQ(stale->problems[0], unreferenced.front() + ": not in manifest");
  EXPECT_EQ(stale->problems[1].rfind(unreferenced.front() + ": unreferenced blob", 0), 0u) << stale->problems[1];

  // With the removed blobs taken out, it is the folder as it is; each name keeps its own
  // remembered digest.
  saved.blobs->Remove(unreferenced);
  ASSERT_EQ(saved.blobs->names.size(), 2u);
  ASSERT_EQ(saved.blobs->remembered.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    ASSERT_TRUE(saved.blobs->remembered[i].has_value());
    EXPECT_EQ(saved.blobs->remembered[i]->sha256, saved.blobs->names[i]);
  }
  Result<VerifyReport> quick = VerifySavedFolder(cap, saved, options);
  ASSERT_TRUE(quick.ok());
  EXPECT_TRUE(quick->ok()) << quick->problems.front();
  EXPECT_TRUE(VerifyFolder(cap, options)->ok());

  // A listing taken without the remembered digests is judged by VerifyFolder.
  VerifyOptions untrusting = options;
  untrusting.trust_remembered_blobs = false;
  saved.blobs = *ListBlobsToVerify(cap, untrusting);
  ASSERT_TRUE(saved.blobs->remembered.empty());
  Result<VerifyReport> judged_whole = VerifySavedFolder(cap, saved, options);
  ASSERT_TRUE(judged_whole.ok());
  EXPECT_TRUE(judged_whole->ok());
  EXPECT_TRUE(judged_whole->manifest.has_value()) << "VerifyFolder read the manifest";
}

TEST(WorkspaceTest, UnreferencedBlobsOfAManifestAreThoseTheFolderListingFinds) {
  std::string cap = CapsuleOfFiles(testing::MakeTempDir("unreferenced_of"), {{"a", "a"}, {"b", "b"}, {"c", "c"}});
  Result<Snapshot> snapshot = Snapshot::Load(cap);
  Result<Manifest> manifest = Manifest::Load(cap);
  ASSERT_TRUE(snapshot.ok() && manifest.ok());
  EXPECT_TRUE(UnreferencedBlobsOf(*manifest, *snapshot).empty());
  snapshot->Remove("b");
  snapshot->Remove("c");
  std::vector<std::string> expected = {BlobPath(Sha256Hex("b")), BlobPath(Sha256Hex("c"))};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(UnreferencedBlobsOf(*manifest, *snapshot), expected);
  EXPECT_EQ(*UnreferencedBlobs(cap, *snapshot), expected);
  // The empty blob every capsule keeps is never unreferenced.
  manifest->files[BlobPath(Sha256Hex(""))] = FileDigest{Sha256Hex(""), 0};
  EXPECT_EQ(UnreferencedBlobsOf(*manifest, *snapshot), expected);
}

// LoadHeader reads what Load reads but keeps no file: the same agent and holder, the same
// refusals, whether the text is canonical (the fast reader) or not (the general one).
TEST(ManifestTest, LoadHeaderIsLoadWithoutTheFilesButTheJournal) {
  std::string cap = CapsuleOfFiles(testing::MakeTempDir("manifest_header"), {{"a", "a"}, {"b", "b"}});
  Result<Manifest> whole = Manifest::Load(cap);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  whole->agent.owner = "owner-1";
  whole->holder_machine = "machine-9";
  whole->holder_epoch = 7;
  ASSERT_TRUE(whole->Save(cap).ok());
  const std::string path = cap + "/" + kManifestPath;
  const std::string canonical = *ReadFile(path);
  const std::string spaced = whole->ToJson().dump(1);  // not canonical: the general reader's
  for (const std::string& text : {canonical, spaced}) {
    ASSERT_TRUE(WriteFileAtomic(path, text).ok());
    Result<Manifest> header = Manifest::LoadHeader(cap);
    ASSERT_TRUE(header.ok()) << header.status().ToString();
    EXPECT_EQ(header->agent.id, whole->agent.id);
    EXPECT_EQ(header->agent.name, whole->agent.name);
    EXPECT_EQ(header->agent.owner, std::optional<std::string>("owner-1"));
    EXPECT_EQ(header->holder_machine, "machine-9");
    EXPECT_EQ(header->holder_epoch, 7u);
    ASSERT_EQ(header->files.size(), 1u);
    ASSERT_TRUE(whole->files.count(kJournalPath));
    EXPECT_EQ(header->files.at(kJournalPath).sha256, whole->files.at(kJournalPath).sha256);
    EXPECT_EQ(header->files.at(kJournalPath).size, whole->files.at(kJournalPath).size);
  }
  // A damaged entry, canonical or not, is refused as Load refuses it.
  std::string bad_digest = canonical;
  const size_t digest_at = bad_digest.find("\"sha256\":\"") + 10;
  bad_digest[digest_at] = 'X';
  for (const std::string& text : {bad_digest, std::string(canonical, 0, canonical.size() - 3), spaced + "x"}) {
    ASSERT_TRUE(WriteFileAtomic(path, text).ok());
    Result<Manifest> header = Manifest::LoadHeader(cap);
    Result<Manifest> loaded = Manifest::Load(cap);
    EXPECT_FALSE(loaded.ok());
    ASSERT_FALSE(header.ok()) << text.substr(0, 80);
    EXPECT_EQ(header.status().ToString(), loaded.status().ToString());
  }
  ASSERT_TRUE(::unlink(path.c_str()) == 0);
  EXPECT_EQ(Manifest::LoadHeader(cap).status().code(), Code::kNotFound);
}

// ---- harness/ and schedule/ ----

TEST(HarnessTest, SkillFrontMatterIsReadAndEachFaultNamed) {
  const std::string path = "harness/skills/pdf-fill/SKILL.md";
  Result<Skill> skill = ParseSkill(path, "---\nname: pdf-fill\ndescription: 'Fill in: forms'\nlicense: MIT\n---\nbody\n");
  ASSERT_TRUE(skill.ok()) << skill.status().message();
  EXPECT_EQ(skill->name, "pdf-fill");
  EXPECT_EQ(skill->description, "Fill in: forms");
  struct Case {
    std::string text, fault;
  };
  for (const Case& c : std::vector<Case>{
           {"name: pdf-fill\n", "missing"},
           {"---\nname: pdf-fill\ndescription: x\n", "not closed"},
           {"---\ndescription: x\n---\n", "no name"},
           {"---\nname: pdf-fill\n---\n", "no description"},
           {"---\nname: PDF\ndescription: x\n---\n", "must be 1 to 64"},
           {"---\nname: other\ndescription: x\n---\n", "not its folder's name"},
           {"---\nname pdf-fill\ndescription: x\n---\n", "is not 'key: value'"},
       }) {
    Result<Skill> bad = ParseSkill(path, c.text);
    ASSERT_FALSE(bad.ok()) << c.text;
    EXPECT_EQ(bad.status().message().rfind(path + ": front matter: ", 0), 0u) << bad.status().message();
    EXPECT_NE(bad.status().message().find(c.fault), std::string::npos) << bad.status().message();
  }
}

TEST(HarnessTest, ThreadFilesNameTheirToolsOnce) {
  Result<Thread> thread = ParseThread("harness/threads/main.json", R"({"tools":["search","read"]})");
  ASSERT_TRUE(thread.ok()) << thread.status().message();
  EXPECT_EQ(thread->name, "main");
  EXPECT_EQ(*thread->tools, (std::set<std::string>{"read", "search"}));
  EXPECT_FALSE(ParseThread("harness/threads/main.json", "{}")->tools.has_value());
  EXPECT_FALSE(ParseThread("harness/threads/main.json", R"({"tools":["a","a"]})").ok());
  EXPECT_FALSE(ParseThread("harness/threads/main.json", R"({"tools":"a"})").ok());
  EXPECT_FALSE(ParseThread("harness/threads/.hidden.json", "{}").ok());
  EXPECT_FALSE(ParseThread("harness/threads/a/b.json", "{}").ok());
  EXPECT_EQ(*ThreadText(*thread), R"({"tools":["read","search"]})");
}

TEST(ScheduleTest, JobsDayAndStateAreChecked) {
  const std::string job = R"({"at":"2026-12-04T08:00:00Z","id":"mail","prompt":"read","every":60,"x":[1]})";
  EXPECT_TRUE(CheckScheduleFile("schedule/waiting/mail.json", job).ok());
  EXPECT_TRUE(CheckScheduleFile("schedule/firing/mail.json", job).ok());
  EXPECT_TRUE(CheckScheduleFile("schedule/day.json", R"(["2026-12-04",0])").ok());
  EXPECT_TRUE(CheckScheduleFile("schedule/state.json", R"({"paused":true})").ok());
  struct Case {
    std::string path, text, fault;
  };
  for (const Case& c : std::vector<Case>{
           {"schedule/later/mail.json", job, "not a schedule file"},
           {"schedule/mail.json", job, "not a schedule file"},
           {"schedule/waiting/other.json", job, "other.json: id"},
           {"schedule/waiting/mail.json", R"({"at":"2026-12-04T08:00:00Z","id":"mail"})", "prompt"},
           {"schedule/waiting/mail.json", R"({"at":"tomorrow","id":"mail","prompt":"p"})", ": at"},
           {"schedule/waiting/mail.json", R"({"at":"2026-12-04T08:00:00Z","every":0,"id":"mail","prompt":"p"})", "every"},
           {"schedule/waiting/mail.json", "[]", "JSON object"},
           {"schedule/day.json", R"(["2026-12-04",-1])", "[day, sent]"},
           {"schedule/day.json", R"({"day":"2026-12-04"})", "[day, sent]"},
           {"schedule/state.json", R"({"paused":"yes"})", "paused"},
       }) {
    Status checked = CheckScheduleFile(c.path, c.text);
    ASSERT_FALSE(checked.ok()) << c.path << " " << c.text;
    EXPECT_NE(checked.message().find(c.fault), std::string::npos) << checked.message();
  }
}

TEST(ScheduleTest, RunningSchedulesMayNotTravelPausedOrAbsentOnesMay) {
  std::string cap = NewCapsule();
  EXPECT_TRUE(CheckSchedulesMayTravel(cap).ok()) << "nothing to run";
  ASSERT_TRUE(MakeDirectories(cap + "/schedule/waiting").ok());
  ASSERT_TRUE(WriteFileAtomic(cap + "/schedule/waiting/a.json", "").ok());
  EXPECT_TRUE(CheckSchedulesMayTravel(cap).ok()) << "an empty job counts as absent";
  ASSERT_TRUE(WriteFileAtomic(cap + "/schedule/waiting/a.json", R"({"at":"2026-12-04T08:00:00Z","id":"a","prompt":"p"})").ok());
  Status running = CheckSchedulesMayTravel(cap);
  EXPECT_EQ(running.code(), Code::kFailedPrecondition);
  EXPECT_NE(running.message().find("capsule schedule pause"), std::string::npos) << running.message();
  ASSERT_TRUE(WriteFileAtomic(cap + "/" + kScheduleStatePath, ScheduleStateText(true)).ok());
  EXPECT_TRUE(CheckSchedulesMayTravel(cap).ok());
}

}  // namespace
}  // namespace capsule
