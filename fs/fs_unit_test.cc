// Unit tests of the pieces of capsulefs that need no mount.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cerrno>
#include <memory>
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "capsule/base/sha256.h"
#include "capsule/base/file_io.h"
#include "capsule/base/scoped_limit.h"
#include "capsule/base/temp_dir.h"
#include "fs/change_log.h"
#include "fs/errno_map.h"
#include "fs/journal_sink.h"
#include "fs/running_hash.h"
#include "fs/state_gate.h"
#include "journal/event.h"

namespace capsule::fs {
namespace {

SnapshotEntry File(const std::string& content) {
  SnapshotEntry entry;
  entry.sha256 = Sha256Hex(content);
  entry.size = content.size();
  return entry;
}

TEST(ChangeLog, ReplayIsIdempotentAndIgnoresATornTail) {
  WorkspaceChange create, rename;
  create.set["a"] = File("one");
  rename.del = {"a"};
  rename.set["b"] = File("one");
  WorkspaceChange recreate;
  recreate.set["a"] = File("two");
  std::string text = *ChangeToLine(create) + *ChangeToLine(rename) + *ChangeToLine(recreate);
  Snapshot snapshot;
  ASSERT_EQ(*ReplayChanges(text + "{\"del\":[", &snapshot), 3u);
  Snapshot again = snapshot;
  ASSERT_TRUE(ReplayChanges(text, &again).ok());
  EXPECT_EQ(again.entries(), snapshot.entries());
  EXPECT_EQ(snapshot.Find("a")->sha256, Sha256Hex("two"));
  EXPECT_EQ(snapshot.Find("b")->sha256, Sha256Hex("one"));
}

// A change the disk takes only in part (here: past the file size limit) is cut off again and
// reported; the changes appended after it, once there is room, are replayed (before, they
// followed the half line, which replay stops at: every later change was lost to a crash).
TEST(ChangeLog, AChangeWrittenInPartIsCutOffAndTheNextOnesStillReplay) {
  const std::string dir = testing::MakeTempDir("change_log");
  const std::string path = dir + "/workspace.log";
  Result<ChangeLog*> opened = ChangeLog::Open(path);
  ASSERT_TRUE(opened.ok()) << opened.status().message();
  std::unique_ptr<ChangeLog> log(*opened);
  WorkspaceChange first, refused, later;
  first.set["first"] = File("one");
  refused.set[std::string(200, 'r')] = File("two");
  later.set["later"] = File("three");
  ASSERT_TRUE(log->Append(first).ok());
  const size_t before = ReadFile(path)->size();
  {
    testing::ScopedLimit limit(RLIMIT_FSIZE, before + 40);
    ASSERT_TRUE(limit.ok());
    Status full = log->Append(refused);
    EXPECT_FALSE(full.ok());
    EXPECT_NE(full.message().find(path), std::string::npos) << full.message();
  }
  EXPECT_EQ(ReadFile(path)->size(), before) << "the part written is cut off";
  ASSERT_TRUE(log->Append(later).ok());
  Snapshot snapshot;
  Result<size_t> applied = ReplayChanges(*ReadFile(path), &snapshot);
  ASSERT_TRUE(applied.ok());
  EXPECT_EQ(*applied, 2u);
  EXPECT_NE(snapshot.Find("first"), nullptr);
  EXPECT_NE(snapshot.Find("later"), nullptr);
  EXPECT_EQ(snapshot.Find(std::string(200, 'r')), nullptr);
  // A log reopened starts after its whole lines.
  log.reset();
  opened = ChangeLog::Open(path);
  ASSERT_TRUE(opened.ok());
  log.reset(*opened);
  ASSERT_TRUE(log->Append(first).ok());
  EXPECT_EQ(*ReplayChanges(*ReadFile(path), &snapshot), 3u);
}

TEST(ChangeLog, ALineWhoseBlobIsNotWholeIsSkippedWhole) {
  WorkspaceChange first, lost, later;
  first.set["a"] = File("one");
  lost.del = {"a"};
  lost.set["b"] = File("lost");
  later.set["c"] = File("three");
  std::string text = *ChangeToLine(first) + *ChangeToLine(lost) + *ChangeToLine(later);
  Snapshot snapshot;
  auto blob_ok = [](const SnapshotEntry& entry) { return entry.sha256 != Sha256Hex("lost"); };
  ASSERT_EQ(*ReplayChanges(text, &snapshot, blob_ok), 2u);
  EXPECT_NE(snapshot.Find("a"), nullptr);  // the rename did not happen
  EXPECT_EQ(snapshot.Find("b"), nullptr);
  EXPECT_NE(snapshot.Find("c"), nullptr);
}

// Each line is canonical JSON as the general writer has it, whatever the names hold, and
// replays to what it says.
TEST(ChangeLog, ALineIsCanonicalAndReplaysWhateverItsNames) {
  const std::vector<std::string> names = {"plain", "with \"quote\"", "tab\there", "caf\u00e9/r\u00e9sum\u00e9",
                                          "back\\slash", "ctl\x01"};
  for (const std::string& name : names) {
    WorkspaceChange change;
    change.del = {name + ".old", "z"};
    change.set[name] = File(name);
    SnapshotEntry folder;
    folder.type = SnapshotEntry::Type::kDirectory;
    folder.mode = 0750;
    folder.uid = 1000;
    change.set["d/" + name] = folder;
    SnapshotEntry link;
    link.type = SnapshotEntry::Type::kSymlink;
    link.target = "../" + name;
    change.set["l"] = link;
    change.times[name] = {12, 345};
    change.times["d/" + name] = {7, 0};
    Result<std::string> line = ChangeToLine(change);
    ASSERT_TRUE(line.ok()) << line.status().message();
    ASSERT_EQ(line->back(), '\n');
    std::string body = line->substr(0, line->size() - 1);
    Result<Json> json = ParseJson(body, "line");
    ASSERT_TRUE(json.ok()) << name << ": " << body;
    EXPECT_EQ(*CanonicalJson(*json), body) << name;
    EXPECT_EQ((*json)["del"], Json(change.del)) << name;

    Snapshot snapshot;
    snapshot.Set(name + ".old", File("old"));
    snapshot.Set("z", File("z"));
    WorkspaceTimes times;
    ASSERT_EQ(*ReplayChanges(*line, &snapshot, nullptr, &times), 1u) << name;
    EXPECT_EQ(snapshot.Find(name + ".old"), nullptr);
    EXPECT_EQ(snapshot.Find("z"), nullptr);
    ASSERT_NE(snapshot.Find(name), nullptr) << name;
    EXPECT_EQ(snapshot.Find(name)->sha256, Sha256Hex(name));
    ASSERT_NE(snapshot.Find("d/" + name), nullptr);
    EXPECT_EQ(snapshot.Find("d/" + name)->mode, 0750u);
    EXPECT_EQ(snapshot.Find("l")->target, "../" + name);
    EXPECT_EQ(times[name].tv_sec, 12);
    EXPECT_EQ(times[name].tv_nsec, 345);
    EXPECT_EQ(times.size(), 2u);
  }
}

// Writes are answered before they are hashed, on whichever threads: the digest still takes
// them in file order.
TEST(RunningHash, HashesQueuedWritesInFileOrderWhateverOrderTheyRunIn) {
  std::string content;
  for (int i = 0; i < 8; ++i) content += std::string(1000 + i * 37, static_cast<char>('a' + i));
  auto hash = std::make_shared<RunningHash>();
  std::vector<DeferredHash> owed;
  uint64_t offset = 0;
  for (int i = 0; i < 8; ++i) {
    size_t length = 1000 + i * 37;
    owed.push_back(RunningHash::Queue(hash, offset, std::string_view(content).substr(offset, length)));
    offset += length;
  }
  EXPECT_EQ(hash->queued(), content.size());
  std::vector<std::thread> threads;
  // The last write run first, each on its own thread: writes 7 to 1 are seen waiting for
  // their turn before the first one runs.
  for (int i = 7; i >= 1; --i) {
    threads.emplace_back([&owed, i] { owed[i].Run(); });
    while (hash->waiting_turns() != 8 - i) std::this_thread::yield();
  }
  threads.emplace_back([&owed] { owed[0].Run(); });
  EXPECT_EQ(hash->FinishHex(), Sha256Hex(content));
  for (std::thread& thread : threads) thread.join();
}

TEST(RunningHash, AWriteOwedIsHashedWhenItsRecordGoes) {
  std::string content = "first part, second part";
  auto hash = std::make_shared<RunningHash>();
  auto first = std::make_unique<DeferredHash>(RunningHash::Queue(hash, 0, std::string_view(content).substr(0, 11)));
  DeferredHash second = RunningHash::Queue(hash, 11, std::string_view(content).substr(11));
  std::thread runner([&second] { second.Run(); });  // waits for the first write's turn
  while (hash->waiting_turns() != 1) std::this_thread::yield();
  first.reset();  // never Run: its destructor hashes it
  runner.join();
  EXPECT_EQ(hash->FinishHex(), Sha256Hex(content));
}

TEST(ErrnoMap, OneTable) {
  EXPECT_EQ(ToErrno(FsError(ENOTEMPTY, "x")), ENOTEMPTY);
  EXPECT_EQ(ToErrno(Status::NotFound("x", "y")), ENOENT);
  EXPECT_EQ(ToErrno(Status::InvalidArgument("x", "y")), EINVAL);
  EXPECT_EQ(ToErrno(Status::PermissionDenied("x", "y")), EPERM);
  EXPECT_EQ(ToErrno(Status::FailedPrecondition("x", "y")), EROFS);
}

// The sink stands for the journal: it takes a write's lines all or none.
TEST(LineAssembler, TakesALineWhenItsNewlineArrives) {
  std::vector<std::string> lines;
  auto unfinished = std::make_shared<UnfinishedLine>();
  LineAssembler journal([&](const std::vector<std::string>& taken) {
    for (const std::string& line : taken) {
      if (line == "bad") return Status::InvalidArgument("journal", "bad line");
    }
    lines.insert(lines.end(), taken.begin(), taken.end());
    return Status::Ok();
  }, unfinished, 10);
  EXPECT_EQ(ToErrno(journal.Write(3, "x\n")), EPERM);
  ASSERT_TRUE(journal.Write(10, "{\"type\":").ok());
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(unfinished->size(), 8u);
  ASSERT_TRUE(journal.Write(18, "1}\nsecond\n").ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"type\":1}", "second"}));
  EXPECT_EQ(ToErrno(journal.Write(28, "bad\n")), EINVAL);
}

// One write holding a good line and a bad one keeps neither, so that a writer that retries
// never records the good one twice; the next write is expected where the refused one began.
TEST(LineAssembler, AWriteIsTakenWholeOrNotAtAll) {
  std::vector<std::string> lines;
  auto unfinished = std::make_shared<UnfinishedLine>();
  LineAssembler journal([&](const std::vector<std::string>& taken) {
    for (const std::string& line : taken) {
      if (line == "BAD") return Status::InvalidArgument("journal", "bad line");
    }
    lines.insert(lines.end(), taken.begin(), taken.end());
    return Status::Ok();
  }, unfinished, 0);
  ASSERT_TRUE(journal.Write(0, "{\"par").ok());
  EXPECT_EQ(ToErrno(journal.Write(5, "tial\ngood\nBAD\n{rest")), EINVAL);
  EXPECT_TRUE(lines.empty());
  EXPECT_EQ(unfinished->size(), 5u);  // "{\"par", taken by the write before, still waits
  ASSERT_TRUE(journal.Write(5, "tial\ngood\n").ok());  // the refused write took no bytes
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"partial", "good"}));
}

// The unfinished line is the journal's: another handle's write finishes it. One that could not
// begin an object, or is over the limit, is refused at its write.
TEST(LineAssembler, TheUnfinishedLineIsSharedCheckedAndBounded) {
  std::vector<std::string> lines;
  auto unfinished = std::make_shared<UnfinishedLine>();
  auto sink = [&](const std::vector<std::string>& taken) {
    lines.insert(lines.end(), taken.begin(), taken.end());
    return Status::Ok();
  };
  LineAssembler first(sink, unfinished, 0, /*append=*/true), second(sink, unfinished, 0, /*append=*/true);
  ASSERT_TRUE(first.Write(0, "{\"type\":").ok());
  ASSERT_TRUE(second.Write(0, "\"x\"}\n").ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"{\"type\":\"x\"}"}));
  EXPECT_EQ(ToErrno(first.Write(0, "not json")), EINVAL);
  EXPECT_EQ(ToErrno(first.Write(0, "{} x")), EINVAL);
  EXPECT_EQ(unfinished->size(), 0u);
  ASSERT_TRUE(first.Write(0, "{\"text\":\"").ok());
  EXPECT_EQ(ToErrno(second.Write(0, std::string(journal::kMaxEventLineBytes, 'a'))), EFBIG);
  EXPECT_EQ(unfinished->size(), 0u) << "a line over the limit is dropped whole";
  EXPECT_EQ(lines.size(), 1u);
}

TEST(LineAssembler, AnAppendHandleWritesAtTheEndWhateverTheOffset) {
  std::vector<std::string> lines;
  LineAssembler journal([&](const std::vector<std::string>& taken) {
    lines.insert(lines.end(), taken.begin(), taken.end());
    return Status::Ok();
  }, std::make_shared<UnfinishedLine>(), 100, /*append=*/true);
  ASSERT_TRUE(journal.Write(40, "one\n").ok());  // the kernel's size lags the canonical lines
  ASSERT_TRUE(journal.Write(7, "two\n").ok());
  EXPECT_EQ(lines, (std::vector<std::string>{"one", "two"}));
}

// A wait for a thaw ends with EINTR once its request is taken back, and counts as waiting
// meanwhile; a freeze's deadline is due only once passed.
TEST(StateGate, AnInterruptedWaitEndsWithEintr) {
  StateGate gate(MountState::kActive);
  ASSERT_TRUE(gate.Freeze([] { return Status::Ok(); }).ok());
  Interruption* interruption = nullptr;
  std::atomic<bool> ready{false};
  std::atomic<int> err{0};
  std::thread writer([&] {
    Interruption mine(&gate);
    interruption = &mine;
    ready = true;
    err = ToErrno(gate.EnterWrite().status());
    while (ready) std::this_thread::yield();  // `mine` lives until the test is done with it
  });
  while (!ready || gate.waiting() != 1) std::this_thread::yield();
  interruption->Fire();
  while (err == 0) std::this_thread::yield();
  ready = false;
  writer.join();
  EXPECT_EQ(err.load(), EINTR);
  EXPECT_EQ(gate.waiting(), 0);
  EXPECT_FALSE(gate.ThawIsDue());
  gate.SetThawDeadline(std::chrono::steady_clock::now() - std::chrono::seconds(1));
  EXPECT_TRUE(gate.ThawIsDue());
  gate.Thaw();
  EXPECT_FALSE(gate.ThawIsDue());
}

TEST(StateGate, RetireRefusesWriters) {
  StateGate gate(MountState::kActive);
  { ASSERT_TRUE(gate.EnterWrite().ok()); }
  ASSERT_TRUE(gate.Freeze([] { return Status::Ok(); }).ok());
  EXPECT_EQ(gate.state(), MountState::kFrozen);
  gate.Retire();
  EXPECT_EQ(ToErrno(gate.EnterWrite().status()), EROFS);
}

}  // namespace
}  // namespace capsule::fs
