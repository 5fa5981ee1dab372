// The owned state through its ports: provenance, soft expiry and "as of", corrections, the
// framework swap, trimmed tool results, retention, and the schema version rule.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/capsule_ports.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/owned_test_util.h"
#include "journal/owned/schema.h"
#include "journal/test_util.h"

namespace capsule::owned {
namespace {

using journal::testing::MachineName;
using journal::testing::MakeTempDir;
using journal::testing::MakeTestCapsule;
using testing::DumpDatabase;
using testing::SteppingClock;
using testing::TimeAt;

class OwnedStateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("owned") + "/cap";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
    clock_ = std::make_shared<int64_t>(0);
    ports_ = Open();
  }
  std::unique_ptr<CapsulePorts> Open() {
    Result<std::unique_ptr<CapsulePorts>> ports = CapsulePorts::Open(dir_, SteppingClock(clock_, 60));
    EXPECT_TRUE(ports.ok()) << ports.status().message();
    return ports.ok() ? std::move(*ports) : nullptr;
  }
  Message Say(const std::string& role, const std::string& text, const std::string& conversation = "main") {
    Message message;
    message.role = role;
    message.content = text;
    message.conversation = conversation;
    if (role == "assistant") {
      message.provider = "openai";
      message.model = "gpt-x";
    }
    Result<Message> appended = ports_->Append(message);
    EXPECT_TRUE(appended.ok()) << appended.status().message();
    return appended.ok() ? *appended : Message{};
  }
  Fact MakeFact(const std::string& key, Json value, double confidence = 0.9) {
    Fact fact;
    fact.subject = "user";
    fact.key = key;
    fact.value = std::move(value);
    fact.confidence = confidence;
    return fact;
  }

  std::string dir_;
  std::shared_ptr<int64_t> clock_;
  std::unique_ptr<CapsulePorts> ports_;
};

TEST_F(OwnedStateTest, HistoryKeepsOrderPerConversationWithPinnedModelAndTokens) {
  Say("system", "be brief");
  Say("user", "hello there");  // 11 bytes: 3 tokens
  Say("user", "elsewhere", "side");
  Message reply = Say("assistant", "hi");
  Message after = Say("user", "thanks");
  EXPECT_EQ(reply.seq, 3);
  EXPECT_EQ(after.model, "gpt-x");  // pinned from the assistant's model

  Result<std::vector<Message>> main = ports_->Load("main");
  ASSERT_TRUE(main.ok()) << main.status().message();
  ASSERT_EQ(main->size(), 4u);
  EXPECT_EQ((*main)[0].role, "system");
  EXPECT_EQ((*main)[1].content, "hello there");
  EXPECT_EQ((*main)[1].tokens, 3);
  EXPECT_FALSE((*main)[1].model.has_value());
  EXPECT_EQ((*main)[3].seq, 4);
  Result<std::vector<Message>> side = ports_->Load("side");
  ASSERT_EQ(side->size(), 1u);
  EXPECT_EQ((*side)[0].seq, 1);

  Message bad;
  bad.role = "narrator";
  EXPECT_EQ(ports_->Append(bad).status().code(), Code::kInvalidArgument);
}

TEST_F(OwnedStateTest, EveryFactHasProvenanceAndIsRefusedWithout) {
  Message said = Say("user", "I prefer French");
  Result<StoredFact> none = ports_->Remember(MakeFact("language", "French"), Provenance{});
  EXPECT_EQ(none.status().code(), Code::kInvalidArgument);
  EXPECT_NE(none.status().message().find("no provenance"), std::string::npos);
  Result<StoredFact> unknown = ports_->Remember(MakeFact("language", "French"), {std::string(64, 'f')});
  EXPECT_EQ(unknown.status().code(), Code::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("not an event of the journal"), std::string::npos);

  Result<StoredFact> fact = ports_->Remember(MakeFact("language", "French"), {said.id});
  ASSERT_TRUE(fact.ok()) << fact.status().message();
  EXPECT_EQ(fact->source, said.id);
  Result<SourceEvent> source = ports_->Source(fact->source);
  ASSERT_TRUE(source.ok());
  ASSERT_TRUE(source->found);
  EXPECT_EQ(source->type, "user_message");
  ASSERT_TRUE(source->message.has_value());
  EXPECT_EQ(source->message->content, "I prefer French");

  // Every fact of the table joins to its source event.
  Result<Database> db = OpenForQuery(dir_);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*db->QueryInt("SELECT count(*) FROM agent_facts f LEFT JOIN journal_events e "
                          "ON e.event_id = f.source_message_id WHERE e.event_id IS NULL"),
            0);
  EXPECT_EQ(*db->QueryInt("SELECT count(*) FROM agent_facts"), 1);
}

TEST_F(OwnedStateTest, SoftExpiryAnswersAsOfATime) {
  Message said = Say("user", "I live in Lyon");                                // t = 0
  Result<StoredFact> lyon = ports_->Remember(MakeFact("city", "Lyon"), {said.id});  // t = 60
  ASSERT_TRUE(lyon.ok()) << lyon.status().message();
  Message moved = Say("user", "I moved away");                                 // t = 120
  ASSERT_TRUE(ports_->Expire("user", "city", {moved.id}).ok());                // t = 180
  EXPECT_EQ(ports_->Expire("user", "city", {moved.id}).code(), Code::kNotFound);

  Result<std::vector<StoredFact>> now = ports_->Recall("user", {"city"});
  ASSERT_TRUE(now.ok()) << now.status().message();
  EXPECT_TRUE(now->empty());  // not valid now
  Result<std::vector<StoredFact>> then = ports_->Recall("user", {"city"}, TimeAt(100));
  ASSERT_TRUE(then.ok());
  ASSERT_EQ(then->size(), 1u);
  EXPECT_EQ((*then)[0].fact.value, "Lyon");
  EXPECT_EQ((*then)[0].valid_to, TimeAt(180));
  EXPECT_TRUE(ports_->Recall("user", {"city"}, TimeAt(30))->empty());   // before it was learnt
  EXPECT_TRUE(ports_->Recall("user", {"city"}, TimeAt(180))->empty());  // valid_to is exclusive
  EXPECT_EQ(ports_->FactHistory("user")->size(), 1u);
  (void)lyon;
}

TEST_F(OwnedStateTest, CorrectionKeepsBothQueryable) {
  Message said = Say("user", "call me Al");                                   // t = 0
  StoredFact first = *ports_->Remember(MakeFact("name", "Al"), {said.id});    // t = 60
  Message fixed = Say("user", "actually, Alice");                             // t = 120
  StoredFact second = *ports_->Remember(MakeFact("name", "Alice"), {fixed.id});  // t = 180

  Result<std::vector<StoredFact>> now = ports_->Recall("user", {"name"});
  ASSERT_EQ(now->size(), 1u);
  EXPECT_EQ((*now)[0].fact.value, "Alice");
  Result<std::vector<StoredFact>> before = ports_->Recall("user", {"name"}, TimeAt(150));
  ASSERT_EQ(before->size(), 1u);
  EXPECT_EQ((*before)[0].fact.value, "Al");
  Result<std::vector<StoredFact>> history = ports_->FactHistory("user");
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[0].ended_by, second.id);
  EXPECT_EQ((*history)[0].valid_to, second.valid_from);
  EXPECT_FALSE((*history)[1].valid_to.has_value());
  (void)first;
}

// One framework opens a run and leaves it awaiting approval; another resumes it with the
// history loaded through the port, finishes and closes it.
TEST_F(OwnedStateTest, FrameworkSwapResumesARunThroughThePorts) {
  Say("user", "book a flight to Oslo");
  ASSERT_TRUE(ports_->OpenRun("run-7", "langgraph", "thread-42").ok());
  Message call;
  call.role = "tool_call";
  call.tool_call_id = "c1";
  call.tool_name = "search_flights";
  call.content = R"({"to":"OSL"})";
  call.run_id = "run-7";
  ASSERT_TRUE(ports_->Append(call).ok());
  Result<RunRecord> waiting = ports_->MarkAwaiting("run-7", "human approval of the booking");
  ASSERT_TRUE(waiting.ok()) << waiting.status().message();
  EXPECT_EQ(waiting->status, "awaiting");
  ports_.reset();  // the first framework goes away

  // A new process, a new framework: same capsule, same ports.
  std::unique_ptr<CapsulePorts> next = Open();
  Result<std::vector<RunRecord>> in_flight = next->Runs(true);
  ASSERT_EQ(in_flight->size(), 1u);
  EXPECT_EQ((*in_flight)[0].awaiting, "human approval of the booking");
  Result<std::vector<Message>> history = next->Load("main");
  ASSERT_EQ(history->size(), 2u);
  EXPECT_EQ((*history)[1].tool_name, "search_flights");

  Result<RunRecord> resumed = next->OpenRun("run-7", "openai-agents", "thread-42");
  ASSERT_TRUE(resumed.ok());
  EXPECT_EQ(resumed->status, "running");
  EXPECT_FALSE(resumed->awaiting.has_value());
  Message reply;
  reply.role = "assistant";
  reply.content = "Booked.";
  reply.provider = "anthropic";
  reply.model = "claude-x";
  reply.run_id = "run-7";
  ASSERT_TRUE(next->Append(reply).ok());
  Result<RunRecord> closed = next->CloseRun("run-7", "completed", 0.42);
  ASSERT_TRUE(closed.ok());
  EXPECT_EQ(closed->status, "completed");
  EXPECT_EQ(closed->framework, "openai-agents");
  EXPECT_EQ(closed->first_framework, "langgraph");
  EXPECT_EQ(closed->resumes, 1);
  EXPECT_EQ(closed->steps, 6);  // opened, tool_call, awaiting, reopened, reply, closed
  EXPECT_DOUBLE_EQ(closed->cost, 0.42);
  EXPECT_TRUE(closed->closed_at.has_value());
  EXPECT_TRUE(next->Runs(true)->empty());
  EXPECT_EQ(next->MarkAwaiting("run-unknown", "x").status().code(), Code::kNotFound);
}

TEST_F(OwnedStateTest, LargeToolResultsAreTrimmedAndStoredOnce) {
  std::string body(kTrimThresholdBytes + 1000, 'z');
  body[10] = 'A';
  for (int i = 0; i < 2; ++i) {
    Message result;
    result.role = "tool";
    result.tool_call_id = "c" + std::to_string(i);
    result.content = body;
    ASSERT_TRUE(ports_->Append(result).ok());
  }
  Message small;
  small.role = "tool";
  small.tool_call_id = "c9";
  small.content = std::string(kTrimThresholdBytes, 'y');  // at the threshold: kept whole
  ASSERT_TRUE(ports_->Append(small).ok());

  Result<Database> db = OpenForQuery(dir_);
  ASSERT_TRUE(db.ok());
  EXPECT_EQ(*db->QueryInt("SELECT count(*) FROM blobs"), 1);
  EXPECT_EQ(*db->QueryInt("SELECT sum(trimmed) FROM messages"), 2);
  EXPECT_EQ(*db->QueryInt("SELECT max(length(content)) FROM messages WHERE trimmed = 1"),
            static_cast<int64_t>(kTrimPrefixBytes));
  EXPECT_EQ(*db->QueryInt("SELECT content_bytes FROM messages WHERE seq = 1"), static_cast<int64_t>(body.size()));
  Result<std::vector<Message>> loaded = ports_->Load("main");
  ASSERT_EQ(loaded->size(), 3u);
  EXPECT_TRUE((*loaded)[0].trimmed);
  EXPECT_EQ((*loaded)[0].content, body);  // whole again through the port
  EXPECT_FALSE((*loaded)[2].trimmed);
}

TEST_F(OwnedStateTest, ClosedRunsLeaveTheProjectionAfterTheirAgeButNotTheJournal) {
  ASSERT_TRUE(WriteFileAtomic(dir_ + "/.capsule/owned.json", R"({"closed_runs_max_age_days":1})").ok());
  ASSERT_TRUE(ports_->OpenRun("old", "langgraph", "t1").ok());
  ASSERT_TRUE(ports_->CloseRun("old", "completed").ok());
  ASSERT_TRUE(ports_->OpenRun("open", "langgraph", "t2").ok());
  EXPECT_EQ(ports_->Runs(false)->size(), 2u);
  *clock_ += 2 * 86400;  // the journal's time moves two days on
  Say("user", "two days later");
  Result<std::vector<RunRecord>> runs = ports_->Runs(false);
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ((*runs)[0].run_id, "open");  // an open run stays, however old
  Result<std::vector<journal::Event>> events = journal::Journal::Read(dir_);
  ASSERT_TRUE(events.ok());
  int closes = 0;
  for (const journal::Event& event : *events) closes += event.type == "run_closed";
  EXPECT_EQ(closes, 1);
  // And a rebuild gives the same.
  std::string followed = *DumpDatabase(OwnedDbPath(dir_));
  ASSERT_TRUE(OwnedState::Reindex(dir_).ok());
  EXPECT_EQ(*DumpDatabase(OwnedDbPath(dir_)), followed);
}

TEST_F(OwnedStateTest, ReadOnlyQueriesAreRefusedWritesBySqlite) {
  Say("user", "hello");
  Result<Database> db = OpenForQuery(dir_);
  ASSERT_TRUE(db.ok());
  Status write = db->Execute("DELETE FROM messages");
  EXPECT_FALSE(write.ok());
  EXPECT_NE(write.message().find("readonly"), std::string::npos) << write.message();
  EXPECT_EQ(*db->QueryInt("SELECT count(*) FROM messages"), 1);
}

TEST_F(OwnedStateTest, MissingCorruptOrOlderDatabasesAreRebuiltNewerOnesRefused) {
  Say("user", "one");
  Say("user", "two");
  const std::string path = OwnedDbPath(dir_);
  std::string rows = *DumpDatabase(path);
  ports_.reset();

  // Missing: rebuilt with the same rows.
  ASSERT_EQ(::unlink(path.c_str()), 0);
  ASSERT_TRUE(FollowJournal(dir_).ok());
  EXPECT_EQ(*DumpDatabase(path), rows);

  // Not a database at all: rebuilt.
  for (const char* suffix : {"-wal", "-shm"}) ::unlink((path + suffix).c_str());
  ASSERT_TRUE(WriteFileAtomic(path, std::string(8192, 'x')).ok());
  ASSERT_TRUE(FollowJournal(dir_).ok());
  EXPECT_EQ(*DumpDatabase(path), rows);

  // An older schema (user_version 0 with some table): rebuilt.
  {
    Result<Database> db = Database::Open(path, Database::Mode::kReadWrite);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->Execute("PRAGMA user_version = 0; DELETE FROM messages").ok());
  }
  ASSERT_TRUE(FollowJournal(dir_).ok());
  EXPECT_EQ(*DumpDatabase(path), rows);

  // Newer and compatible: used. Newer and incompatible: refused, clearly, and reindex too.
  {
    Result<Database> db = Database::Open(path, Database::Mode::kReadWrite);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->Execute("PRAGMA user_version = " + std::to_string(kSchemaVersion + 1)).ok());
  }
  EXPECT_TRUE(FollowJournal(dir_).ok());
  {
    Result<Database> db = Database::Open(path, Database::Mode::kReadWrite);
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->Execute("PRAGMA user_version = " + std::to_string(kSchemaVersion + 2) +
                            "; UPDATE owned_meta SET value = '" + std::to_string(kSchemaVersion + 1) +
                            "' WHERE key = 'compatible_version'")
                    .ok());
  }
  Status refused = FollowJournal(dir_);
  EXPECT_EQ(refused.code(), Code::kFailedPrecondition);
  EXPECT_NE(refused.message().find("schema version " + std::to_string(kSchemaVersion + 2) +
                                   " is newer than this build's " + std::to_string(kSchemaVersion) +
                                   "; upgrade capsule"),
            std::string::npos)
      << refused.message();
  EXPECT_EQ(OwnedState::Reindex(dir_).status().code(), Code::kFailedPrecondition);
}

bool HasRebuildDebris(const std::string& dir) {
  Result<std::vector<TreeEntry>> entries = ListTree(dir + "/.capsule");
  if (!entries.ok()) return false;
  for (const TreeEntry& entry : *entries) {
    if (entry.path.rfind(".tmp-owned.db.", 0) == 0) return true;
  }
  return false;
}

// kill -9 of a reindex midway: the database in place is the old one, whole; the next
// catch-up clears the debris.
TEST_F(OwnedStateTest, AReindexKilledMidwayLeavesTheOldDatabaseInPlace) {
  {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(dir_, SteppingClock(clock_, 1));
    ASSERT_TRUE(journal.ok());
    for (int i = 0; i < 8000; ++i) {
      ASSERT_TRUE(journal->Append("user_message", {{"text", "line " + std::to_string(i)}}).ok());
    }
  }
  ASSERT_TRUE(FollowJournal(dir_).ok());
  const std::string rows = *DumpDatabase(OwnedDbPath(dir_));
  bool killed_midway = false;
  for (int delay_ms : {30, 60, 120, 240, 10}) {
    pid_t pid = ::fork();
    if (pid == 0) {
      (void)OwnedState::Reindex(dir_);
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    EXPECT_EQ(*DumpDatabase(OwnedDbPath(dir_)), rows);
    if (WIFSIGNALED(status) && HasRebuildDebris(dir_)) {
      killed_midway = true;
      break;
    }
  }
  EXPECT_TRUE(killed_midway) << "no reindex was caught midway";
  ASSERT_TRUE(OwnedState::Reindex(dir_).ok());
  EXPECT_FALSE(HasRebuildDebris(dir_));
  EXPECT_EQ(*DumpDatabase(OwnedDbPath(dir_)), rows);
}

TEST_F(OwnedStateTest, AJournalReplacedUnderneathIsDetectedAndRebuilt) {
  Say("user", "one");
  Say("user", "two");
  // Another copy of the capsule, same machine, different history: its journal is put in place.
  std::string other = MakeTempDir("owned-other") + "/cap";
  ASSERT_TRUE(MakeTestCapsule(other, MachineName(1)).ok());
  {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(other, SteppingClock(clock_, 60));
    ASSERT_TRUE(journal->Append("user_message", {{"text", "something else entirely"}}).ok());
  }
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kJournalPath), *ReadFile(JoinPath(other, kJournalPath))).ok());
  Result<std::vector<Message>> loaded = ports_->Load("main");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  ASSERT_EQ(loaded->size(), 1u);
  EXPECT_EQ((*loaded)[0].content, "something else entirely");
}

// An append's follow (FollowJournalWithin) projects only a little journal and never
// rebuilds: more is left, untouched, to the next catch-up, which projects it all.
TEST_F(OwnedStateTest, AnAppendsFollowLeavesALargeCatchUpToTheNextQuery) {
  Say("user", "one");
  ports_.reset();
  const std::string path = OwnedDbPath(dir_);
  auto messages = [&] {
    Result<Database> db = Database::Open(path, Database::Mode::kReadOnly);
    if (!db.ok()) return int64_t{-1};
    Result<Statement> count = db->Prepare("SELECT count(*) FROM messages");
    if (!count.ok()) return int64_t{-1};
    Result<bool> row = count->Step();
    if (!row.ok() || !*row) return int64_t{-1};
    return count->ColumnInt(0);
  };
  ASSERT_EQ(messages(), 1);
  {
    Result<journal::Journal> journal = journal::Journal::OpenForWrite(dir_, SteppingClock(clock_, 60));
    ASSERT_TRUE(journal.ok()) << journal.status().message();
    ASSERT_TRUE(journal->Append("user_message", {{"text", std::string(100000, 'x')}}).ok());
  }
  Result<ProjectionStats> within = FollowJournalWithin(dir_, 50000);
  ASSERT_TRUE(within.ok()) << within.status().message();
  EXPECT_TRUE(within->deferred);
  EXPECT_EQ(messages(), 1);
  within = FollowJournalWithin(dir_, 200000);
  ASSERT_TRUE(within.ok()) << within.status().message();
  EXPECT_FALSE(within->deferred);
  EXPECT_EQ(messages(), 2);

  // A database to rebuild from a journal past the limit is left to the next query too; one
  // within it is rebuilt.
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((path + suffix).c_str());
  within = FollowJournalWithin(dir_, 50000);
  ASSERT_TRUE(within.ok()) << within.status().message();
  EXPECT_TRUE(within->deferred);
  EXPECT_FALSE(PathExists(path));
  within = FollowJournalWithin(dir_, 200000);
  ASSERT_TRUE(within.ok()) << within.status().message();
  EXPECT_FALSE(within->deferred);
  EXPECT_TRUE(within->rebuilt);
  EXPECT_EQ(messages(), 2);
}

TEST_F(OwnedStateTest, ACorruptJournalIsReportedNotProjected) {
  Say("user", "one");
  std::string path = JoinPath(dir_, kJournalPath);
  std::string text = *ReadFile(path);
  text.replace(text.find("one"), 3, "two");  // the id no longer matches
  ASSERT_TRUE(WriteFileAtomic(path, text).ok());
  Status followed = FollowJournal(dir_);
  EXPECT_EQ(followed.code(), Code::kCorruption);
  EXPECT_NE(followed.message().find("journal line 1"), std::string::npos) << followed.message();
}

}  // namespace
}  // namespace capsule::owned
