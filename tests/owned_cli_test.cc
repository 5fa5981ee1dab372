// The owned state through the real binary: capsule sql (read-only), facts, why, runs,
// reindex; the projection after log append and merge; and through a real mount.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/schema.h"
#include "journal/owned/sqlite.h"
#include "tests/cli_runner.h"
#include "tests/mount_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::RunProgram;
using testing::RunResult;

std::string Trim(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class OwnedCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("owned-cli");
    cap_ = root_ + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  std::string Append(const std::string& cap, const std::string& type, const std::string& data) {
    RunResult run = RunCapsule({"log", "append", cap, "--type", type, "--data", data});
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_EQ(run.err, "");  // the projection followed without a warning
    return Trim(run.out);
  }
  std::string Sql(const std::string& cap, const std::string& query, bool json = false) {
    std::vector<std::string> args = {"sql", cap, query};
    if (json) args.push_back("--json");
    RunResult run = RunCapsule(args);
    EXPECT_EQ(run.exit_code, 0) << query << ": " << run.err;
    return run.out;
  }
  // Every table's rows, in a fixed order.
  std::string AllRows(const std::string& cap) {
    std::string out;
    for (const char* table : {"conversations", "messages", "blobs", "agent_facts", "agent_runs", "journal_events",
                              "journal_machines", "projection_state"}) {
      out += Sql(cap, std::string("SELECT * FROM ") + table + " ORDER BY 1, 2", true);
    }
    return out;
  }
  std::string root_, cap_;
};

TEST_F(OwnedCliTest, FactsWhyAndSoftExpiryThroughTheBinary) {
  std::string said = Append(cap_, "user_message", R"({"text":"Please answer in French"})");
  std::string fact = Append(cap_, "fact_remembered",
                            R"({"subject":"user","key":"language","value":"French","confidence":0.8,"source":")" +
                                said + R"("})");
  RunResult facts = RunCapsule({"facts", cap_, "user"});
  ASSERT_EQ(facts.exit_code, 0) << facts.err;
  EXPECT_NE(facts.out.find("language\t\"French\"\t0.80\t"), std::string::npos) << facts.out;
  EXPECT_NE(facts.out.find(said), std::string::npos);

  RunResult why = RunCapsule({"why", cap_, "user", "language", "--json"});
  ASSERT_EQ(why.exit_code, 0) << why.err;
  Json answer = *ParseJson(why.out, "why");
  EXPECT_EQ(answer["fact"]["id"], fact);
  EXPECT_EQ(answer["source"]["id"], said);
  EXPECT_EQ(answer["source"]["found"], true);
  EXPECT_EQ(answer["source"]["type"], "user_message");
  EXPECT_EQ(answer["source"]["message"]["content"], "Please answer in French");
  RunResult why_text = RunCapsule({"why", cap_, "user", "language"});
  EXPECT_NE(why_text.out.find("user: Please answer in French"), std::string::npos) << why_text.out;

  // The time it was learnt, then expired: not believed now, still answerable as of then.
  std::string learnt = *Json::parse(Sql(cap_, "SELECT valid_from FROM agent_facts", true))[0]["valid_from"].get_ptr<const std::string*>();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // ts has whole seconds
  std::string changed = Append(cap_, "user_message", R"({"text":"English is fine now"})");
  Append(cap_, "fact_expired", R"({"subject":"user","key":"language","source":")" + changed + R"("})");
  RunResult none = RunCapsule({"facts", cap_, "user"});  // none believed now: exit 1, as why
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_EQ(Trim(none.out), "");
  EXPECT_NE(none.err.find("facts user: none believed now"), std::string::npos) << none.err;
  RunResult gone = RunCapsule({"why", cap_, "user", "language"});
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("capsule: fact user/language: not believed now"), std::string::npos) << gone.err;
  RunResult then = RunCapsule({"facts", cap_, "user", "--as-of", learnt, "--json"});
  ASSERT_EQ(then.exit_code, 0) << then.err;
  Json then_facts = *ParseJson(then.out, "facts");
  ASSERT_EQ(then_facts.size(), 1u);
  EXPECT_EQ(then_facts[0]["value"], "French");
  EXPECT_FALSE(then_facts[0]["valid_to"].is_null());
  EXPECT_EQ(*ParseJson(RunCapsule({"facts", cap_, "user", "--all", "--json"}).out, "all"), Json::parse("[" + then_facts[0].dump() + "]"));
  EXPECT_EQ(RunCapsule({"facts", cap_, "user", "--as-of", "yesterday"}).exit_code, 1);

  // Provenance for every fact: none without a source event.
  EXPECT_EQ(Trim(Sql(cap_, "SELECT count(*) FROM agent_facts WHERE source_message_id NOT IN "
                           "(SELECT event_id FROM journal_events)")),
            "0");
}

TEST_F(OwnedCliTest, SqlIsReadOnlyByTheDatabaseAndPrintsTsvOrJson) {
  Append(cap_, "user_message", "{\"text\":\"tab\\there\"}");
  Append(cap_, "assistant_message", R"({"text":"ok","provider":"openai","model":"gpt-x"})");
  EXPECT_EQ(Sql(cap_, "SELECT seq, role, content, tool_name FROM messages ORDER BY seq"),
            "1\tuser\ttab\\there\t\\N\n2\tassistant\tok\t\\N\n");
  Json rows = *ParseJson(Sql(cap_, "SELECT seq, role, model, tokens FROM messages ORDER BY seq", true), "rows");
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["model"], "gpt-x");
  EXPECT_EQ(rows[0]["model"], nullptr);
  EXPECT_EQ(rows[0]["tokens"], 2);  // "tab\there": 8 bytes

  // Writes are refused by SQLite itself, whatever the text looks like.
  for (const char* write : {"DELETE FROM messages", "  with x as (select 1) insert into blobs values ('a', 1, x'00')",
                            "PRAGMA user_version = 99", "CREATE TABLE t (x)"}) {
    RunResult refused = RunCapsule({"sql", cap_, write});
    EXPECT_EQ(refused.exit_code, 1) << write;
    EXPECT_NE(refused.err.find("readonly"), std::string::npos) << write << ": " << refused.err;
  }
  EXPECT_EQ(Trim(Sql(cap_, "SELECT count(*) FROM messages")), "2");
  // Nor does it write any other file.
  for (const std::string& other : {"ATTACH '" + root_ + "/other.db' AS o", "VACUUM INTO '" + root_ + "/other.db'"}) {
    EXPECT_EQ(RunCapsule({"sql", cap_, other}).exit_code, 1) << other;
    EXPECT_FALSE(PathExists(root_ + "/other.db")) << other;
  }
  EXPECT_EQ(RunCapsule({"sql", cap_, "SELECT 1; SELECT 2"}).exit_code, 1);
  EXPECT_EQ(RunCapsule({"sql", cap_, "SELECT nope FROM messages"}).exit_code, 1);
  EXPECT_EQ(RunCapsule({"sql", cap_}).exit_code, 2);
}

TEST_F(OwnedCliTest, RunsInFlightAndTheFrameworkThatResumedThem) {
  Append(cap_, "run_opened", R"({"run_id":"r1","framework":"langgraph","thread_key":"t-1"})");
  Append(cap_, "run_awaiting", R"({"run_id":"r1","awaiting":"approval"})");
  Append(cap_, "run_opened", R"({"run_id":"r2","framework":"langgraph","thread_key":"t-2"})");
  Append(cap_, "run_closed", R"({"run_id":"r2","status":"failed","cost":0.5})");
  RunResult in_flight = RunCapsule({"runs", cap_, "--in-flight"});
  EXPECT_EQ(in_flight.out, "r1\tlanggraph\tawaiting\tapproval\t2 steps\tt-1\n");
  Append(cap_, "run_opened", R"({"run_id":"r1","framework":"openai-agents","thread_key":"t-1"})");
  Append(cap_, "run_closed", R"({"run_id":"r1","status":"completed"})");
  EXPECT_EQ(RunCapsule({"runs", cap_, "--in-flight"}).out, "");
  Json runs = *ParseJson(RunCapsule({"runs", cap_, "--json"}).out, "runs");
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["run_id"], "r1");
  EXPECT_EQ(runs[0]["framework"], "openai-agents");
  EXPECT_EQ(runs[0]["first_framework"], "langgraph");
  EXPECT_EQ(runs[1]["cost"], 0.5);
}

TEST_F(OwnedCliTest, ReindexRebuildsTheSameRowsAndLosingTheDatabaseLosesNothing) {
  std::string said = Append(cap_, "user_message", R"({"text":"hi"})");
  Append(cap_, "tool_result", R"({"call_id":"c","content":")" + std::string(6000, 'q') + R"(","is_error":false})");
  Append(cap_, "fact_remembered", R"({"subject":"s","key":"k","value":{"a":[1,2]},"confidence":1,"source":")" + said + R"("})");
  Append(cap_, "run_opened", R"({"run_id":"r","framework":"f","thread_key":"t"})");
  std::string before = AllRows(cap_);
  EXPECT_EQ(Trim(Sql(cap_, "SELECT trimmed, length(content), content_bytes FROM messages WHERE role = 'tool'")),
            "1\t1024\t6000");
  RunResult reindex = RunCapsule({"reindex", cap_});
  ASSERT_EQ(reindex.exit_code, 0) << reindex.err;
  EXPECT_NE(reindex.out.find("4 events"), std::string::npos) << reindex.out;
  EXPECT_EQ(AllRows(cap_), before);
  std::string db = owned::OwnedDbPath(cap_);
  for (const char* suffix : {"", "-wal", "-shm"}) ::unlink((db + suffix).c_str());
  EXPECT_EQ(AllRows(cap_), before);  // rebuilt on the next query
  // The local database is no part of the capsule: it verifies and exports without it.
  EXPECT_EQ(RunCapsule({"verify", cap_}).exit_code, 0);
  EXPECT_EQ(RunCapsule({"reindex", root_ + "/absent"}).exit_code, 1);
}

TEST_F(OwnedCliTest, ANewerSchemaIsRefusedClearly) {
  Append(cap_, "user_message", R"({"text":"hi"})");
  {
    Result<owned::Database> db = owned::Database::Open(owned::OwnedDbPath(cap_), owned::Database::Mode::kReadWrite);
    ASSERT_TRUE(db.ok());
    int newer = owned::kSchemaVersion + 2;
    ASSERT_TRUE(db->Execute("PRAGMA user_version = " + std::to_string(newer) + "; UPDATE owned_meta SET value = '" +
                            std::to_string(newer) + "' WHERE key = 'compatible_version'")
                    .ok());
  }
  RunResult refused = RunCapsule({"sql", cap_, "SELECT 1"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_EQ(refused.err, "capsule: " + owned::OwnedDbPath(cap_) + ": schema version " +
                             std::to_string(owned::kSchemaVersion + 2) + " is newer than this build's " +
                             std::to_string(owned::kSchemaVersion) + "; upgrade capsule\n");
  // Appending still works (the journal is the truth); the projection warns.
  RunResult append = RunCapsule({"log", "append", cap_, "--type", "user_message", "--data", R"({"text":"x"})"});
  EXPECT_EQ(append.exit_code, 0);
  EXPECT_NE(append.err.find("capsule: warning: owned state not updated"), std::string::npos) << append.err;
}

TEST_F(OwnedCliTest, AMergedJournalProjectsTheSameWhicheverSideMerges) {
  std::string other = root_ + "/other";
  ASSERT_EQ(testing::Shell("cp -a " + cap_ + " " + other), 0);
  ASSERT_EQ(RunCapsule({"adopt", other}).exit_code, 0);
  std::string a1 = Append(cap_, "user_message", R"({"text":"a1"})");
  Append(other, "user_message", R"({"text":"b1"})");
  Append(other, "fact_remembered", R"({"subject":"u","key":"k","value":"from b","confidence":0.5,"source":")" + a1 + R"("})");
  Append(cap_, "fact_remembered", R"({"subject":"u","key":"k","value":"from a","confidence":0.5,"source":")" + a1 + R"("})");
  Append(cap_, "run_opened", R"({"run_id":"r","framework":"f","thread_key":"t"})");
  Append(other, "assistant_message", R"({"text":"b2","provider":"p","model":"m"})");
  ASSERT_EQ(testing::Shell("cp -a " + cap_ + " " + root_ + "/a && cp -a " + other + " " + root_ + "/b"), 0);
  ASSERT_EQ(RunCapsule({"adopt", root_ + "/a"}).exit_code, 0);  // copies take writes once adopted
  ASSERT_EQ(RunCapsule({"adopt", root_ + "/b"}).exit_code, 0);
  RunResult ab = RunCapsule({"merge", root_ + "/a", other});
  ASSERT_EQ(ab.exit_code, 0) << ab.err;
  EXPECT_EQ(ab.err, "");
  RunResult ba = RunCapsule({"merge", root_ + "/b", cap_});
  ASSERT_EQ(ba.exit_code, 0) << ba.err;
  ASSERT_EQ(*ReadFile(root_ + "/a/memory/timeline_events.jsonl"), *ReadFile(root_ + "/b/memory/timeline_events.jsonl"));
  std::string rows = AllRows(root_ + "/a");
  EXPECT_EQ(rows, AllRows(root_ + "/b"));
  EXPECT_EQ(Trim(Sql(root_ + "/a", "SELECT count(*) FROM messages")), "3");
  ASSERT_EQ(RunCapsule({"reindex", root_ + "/a"}).exit_code, 0);
  EXPECT_EQ(AllRows(root_ + "/a"), rows);
}

TEST_F(OwnedCliTest, TheMountFollowsEveryLineItAppends) {
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Append(cap_, "user_message", R"({"text":"before the mount"})");  // the database exists

  testing::Mount mount(cap_, mnt);
  ASSERT_TRUE(mount.up());
  auto write_line = [&](const std::string& line) {
    return testing::Shell("printf '%s\\n' '" + line + "' >> " + mnt + "/memory/timeline_events.jsonl");
  };
  EXPECT_EQ(write_line(R"({"type":"user_message","data":{"text":"through the mount"}})"), 0);
  EXPECT_EQ(write_line(R"({"type":"run_opened","data":{"run_id":"m1","framework":"fw","thread_key":"t"}})"), 0);
  // Read the database directly, without the catch-up every capsule command does first: the
  // mount follows in the background, so within moments of the appends.
  int64_t messages = 0, runs = 0;
  for (int i = 0; i < 200 && (messages != 1 || runs != 1); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    Result<owned::Database> db = owned::Database::Open(owned::OwnedDbPath(cap_), owned::Database::Mode::kReadOnly);
    ASSERT_TRUE(db.ok()) << db.status().message();
    Result<int64_t> m = db->QueryInt("SELECT count(*) FROM messages WHERE content = 'through the mount'");
    Result<int64_t> r = db->QueryInt("SELECT count(*) FROM agent_runs WHERE run_id = 'm1'");
    if (m.ok()) messages = *m;
    if (r.ok()) runs = *r;
  }
  EXPECT_EQ(messages, 1);
  EXPECT_EQ(runs, 1);
  mount.Unmount();
  EXPECT_EQ(RunCapsule({"verify", cap_}).exit_code, 0);
  EXPECT_EQ(Trim(Sql(cap_, "SELECT count(*) FROM journal_events")), "3");
}

// The mount never rebuilds inside a write: with no database, appends go on and the next
// query builds it.
TEST_F(OwnedCliTest, TheMountLeavesARebuildToTheNextQuery) {
  std::string mnt = root_ + "/mnt";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  testing::Mount mount(cap_, mnt);
  ASSERT_TRUE(mount.up());
  EXPECT_EQ(testing::Shell("printf '%s\\n' '{\"type\":\"user_message\",\"data\":{\"text\":\"m\"}}' >> " + mnt +
                           "/memory/timeline_events.jsonl"),
            0);
  EXPECT_FALSE(PathExists(owned::OwnedDbPath(cap_)));
  mount.Unmount();
  EXPECT_EQ(Trim(Sql(cap_, "SELECT content FROM messages")), "m");
}

}  // namespace
}  // namespace capsule
