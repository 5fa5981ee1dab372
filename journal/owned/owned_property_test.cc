// Property tests: the projection is a function of the journal. On random journals of several
// machines (every event type, large tool results, corrections, runs left open and closed,
// one-way merges that insert events before the end), a database that followed every append
// and merge incrementally has exactly the rows `reindex` rebuilds, and two merge orders give
// the same journal and the same rows.
#include <random>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/owned/owned_state.h"
#include "journal/owned/owned_test_util.h"
#include "journal/owned/sqlite.h"
#include "journal/test_util.h"

namespace capsule::owned {
namespace {

using journal::Event;
using journal::Journal;
using journal::testing::CopyCapsuleAs;
using journal::testing::MachineName;
using journal::testing::MakeTempDir;
using journal::testing::MakeTestCapsule;
using testing::DumpDatabase;
using testing::SteppingClock;

struct Machine {
  std::string dir;
  std::shared_ptr<int64_t> clock;
  std::unique_ptr<OwnedState> state;
  std::vector<std::string> ids;  // events this machine has seen appended here
};

class Generator {
 public:
  explicit Generator(uint32_t seed) : rng_(seed) {}

  // A random event for `machine`: type and data.
  std::pair<std::string, Json> Next(const Machine& machine) {
    const std::string conversation = rng_() % 4 == 0 ? "side" : "main";
    Json data;
    switch (rng_() % 12) {
      case 0: data = {{"text", "system " + Word()}}; return Tag("system", data, conversation);
      case 1:
      case 2: data = {{"text", "user says " + Word()}}; return Tag("user_message", data, conversation);
      case 3:
        data = {{"text", "assistant " + Word()}, {"provider", "openai"}, {"model", rng_() % 2 ? "gpt-a" : "gpt-b"}};
        return Tag("assistant_message", data, conversation);
      case 4:
        data = {{"call_id", "c" + Word()}, {"name", "ls"}, {"arguments", {{"path", Word()}}}};
        return Tag("tool_call", data, conversation);
      case 5: {
        // Some bodies over the trim threshold, some repeated (stored once).
        std::string body = rng_() % 3 == 0 ? std::string(5000 + rng_() % 3 * 1000, 'x') : "result " + Word();
        data = {{"call_id", "c" + Word()}, {"content", body}, {"is_error", rng_() % 5 == 0}};
        return Tag("tool_result", data, conversation);
      }
      case 6: data = {{"provider", "anthropic"}, {"model", "claude-" + Word()}}; return Tag("model_switch", data, conversation);
      case 7:
      case 8: {
        // Usually sourced from a known event; sometimes from one this machine has not seen.
        std::string source = machine.ids.empty() || rng_() % 6 == 0 ? std::string(64, 'a' + rng_() % 6)
                                                                     : machine.ids[rng_() % machine.ids.size()];
        data = {{"subject", rng_() % 2 ? "user" : "project"},
                {"key", "k" + std::to_string(rng_() % 3)},
                {"value", rng_() % 2 ? Json(Word()) : Json({{"n", static_cast<int>(rng_() % 100)}})},
                {"confidence", (rng_() % 11) / 10.0},
                {"source", source}};
        return Tag("fact_remembered", data, conversation);
      }
      case 9: {
        std::string source = machine.ids.empty() ? std::string(64, 'b') : machine.ids.back();
        data = {{"subject", "user"}, {"key", "k" + std::to_string(rng_() % 3)}, {"source", source}};
        return Tag("fact_expired", data, conversation);
      }
      default: {
        std::string run = "run" + std::to_string(rng_() % 4);
        switch (rng_() % 5) {
          case 0:
            data = {{"run_id", run}, {"framework", rng_() % 2 ? "langgraph" : "crewai"}, {"thread_key", "t" + Word()}};
            return Tag("run_opened", data, conversation);
          case 1: data = {{"run_id", run}, {"awaiting", "approval"}}; return Tag("run_awaiting", data, conversation);
          case 2: data = {{"run_id", run}, {"status", "completed"}, {"cost", 0.25}}; return Tag("run_closed", data, conversation);
          default:
            data = {{"text", "step of " + run}, {"run_id", run}, {"cost", 0.5}};
            return Tag("user_message", data, conversation);
        }
      }
    }
  }

  std::mt19937& rng() { return rng_; }

 private:
  std::pair<std::string, Json> Tag(const std::string& type, Json data, const std::string& conversation) {
    if (conversation != "main") data["conversation"] = conversation;
    return {type, data};
  }
  std::string Word() { return std::to_string(rng_() % 50); }
  std::mt19937 rng_;
};

std::string Dump(const std::string& dir) {
  Result<std::string> dump = DumpDatabase(OwnedDbPath(dir));
  EXPECT_TRUE(dump.ok()) << dump.status().message();
  return dump.ok() ? *dump : "";
}

// The rows a database that followed `dir` incrementally holds, then the rows reindex gives.
void ExpectReindexEqual(const std::string& dir) {
  std::string followed = Dump(dir);
  Result<ProjectionStats> rebuilt = OwnedState::Reindex(dir);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().message();
  EXPECT_GT(rebuilt->events, 0u);
  EXPECT_EQ(followed, Dump(dir)) << dir;
}

class OwnedPropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(OwnedPropertyTest, FollowingEqualsReindexAndMergeOrderDoesNotMatter) {
  const int seed = GetParam();
  Generator gen(static_cast<uint32_t>(seed));
  std::string root = MakeTempDir("owned-property");
  std::vector<Machine> machines(3);
  for (size_t m = 0; m < machines.size(); ++m) {
    machines[m].dir = root + "/m" + std::to_string(m);
    // Clocks three hours apart per event, offset per machine: ts do not follow journal order, and
    // with a 1-day retention closed runs leave the projection as the journal's time moves on.
    machines[m].clock = std::make_shared<int64_t>(static_cast<int64_t>(m) * 7200);
    if (m == 0) {
      ASSERT_TRUE(MakeTestCapsule(machines[m].dir, MachineName(1)).ok());
      if (seed % 2 == 0) {
        ASSERT_TRUE(WriteFileAtomic(machines[m].dir + "/.capsule/owned.json", R"({"closed_runs_max_age_days":1})").ok());
      }
    } else {
      ASSERT_TRUE(CopyCapsuleAs(machines[0].dir, machines[m].dir, MachineName(static_cast<int>(m) + 1)).ok());
    }
  }
  int merges = 0, rebuilds_on_merge = 0, follows = 0, rebuilds_on_append = 0;
  for (int round = 0; round < 120; ++round) {
    Machine& machine = machines[gen.rng()() % machines.size()];
    if (gen.rng()() % 8 == 0) {
      const Machine& other = machines[gen.rng()() % machines.size()];
      Result<Journal> journal = Journal::OpenForWrite(machine.dir, SteppingClock(machine.clock, 10800));
      ASSERT_TRUE(journal.ok());
      Result<std::vector<Event>> theirs = Journal::Read(other.dir);
      ASSERT_TRUE(theirs.ok());
      for (const Event& event : *theirs) machine.ids.push_back(event.id);
      ASSERT_TRUE(journal->MergeFrom(*theirs).ok());
      ++merges;
      if (machine.state) {
        Result<ProjectionStats> followed = machine.state->CatchUp();
        ASSERT_TRUE(followed.ok()) << followed.status().message();
        rebuilds_on_merge += followed->rebuilt;
      }
      continue;
    }
    Result<Journal> journal = Journal::OpenForWrite(machine.dir, SteppingClock(machine.clock, 10800));
    ASSERT_TRUE(journal.ok());
    auto [type, data] = gen.Next(machine);
    Result<Event> event = journal->Append(type, data);
    ASSERT_TRUE(event.ok()) << type << " " << data.dump() << ": " << event.status().message();
    machine.ids.push_back(event->id);
    if (!machine.state) {
      Result<OwnedState> opened = OwnedState::Open(machine.dir);
      ASSERT_TRUE(opened.ok()) << opened.status().message();
      machine.state = std::make_unique<OwnedState>(std::move(*opened));
    } else {
      Result<ProjectionStats> followed = machine.state->CatchUp();
      ASSERT_TRUE(followed.ok()) << followed.status().message();
      ++follows;
      rebuilds_on_append += followed->rebuilt;
    }
  }
  // Appends are followed incrementally: no rebuild.
  EXPECT_GT(follows, 0);
  EXPECT_EQ(rebuilds_on_append, 0);
  for (const Machine& machine : machines) {
    if (!machine.state) continue;
    ExpectReindexEqual(machine.dir);
  }

  // Two merge orders: the same journal bytes, the same rows, each followed incrementally.
  std::string ab = root + "/ab", ba = root + "/ba";
  ASSERT_TRUE(CopyCapsuleAs(machines[0].dir, ab, MachineName(1)).ok());
  ASSERT_TRUE(CopyCapsuleAs(machines[1].dir, ba, MachineName(2)).ok());
  for (const auto& [target, order] : {std::pair{ab, std::vector<size_t>{1, 2}}, std::pair{ba, std::vector<size_t>{2, 0}}}) {
    Result<Journal> journal = Journal::OpenForWrite(target, SteppingClock(machines[0].clock, 3600));
    ASSERT_TRUE(journal.ok());
    ASSERT_TRUE(OwnedState::Open(target).ok());
    for (size_t m : order) {
      ASSERT_TRUE(journal->MergeFrom(*Journal::Read(machines[m].dir)).ok());
      Status followed = FollowJournal(target);
      ASSERT_TRUE(followed.ok()) << followed.message();
    }
  }
  ASSERT_EQ(*ReadFile(JoinPath(ab, kJournalPath)), *ReadFile(JoinPath(ba, kJournalPath)));
  std::string rows_ab = Dump(ab);
  EXPECT_EQ(rows_ab, Dump(ba));
  EXPECT_NE(rows_ab.find("== messages\n"), std::string::npos);
  ExpectReindexEqual(ab);
  // How many runs retention let go of here (closed, in the journal, not in agent_runs).
  {
    Result<Database> db = Database::Open(OwnedDbPath(ab), Database::Mode::kReadOnly);
    ASSERT_TRUE(db.ok());
    Result<int64_t> pruned = db->QueryInt(
        "SELECT count(DISTINCT run_id) FROM journal_events WHERE type = 'run_closed' AND run_id NOT IN "
        "(SELECT run_id FROM agent_runs)");
    ASSERT_TRUE(pruned.ok());
    RecordProperty("pruned_runs", static_cast<int>(*pruned));
    if (seed % 2 != 0) {
      EXPECT_EQ(*pruned, 0);  // 30 days: nothing is that old here
    }
  }
  RecordProperty("merges", merges);
  RecordProperty("rebuilds_on_merge", rebuilds_on_merge);
}

INSTANTIATE_TEST_SUITE_P(Seeds, OwnedPropertyTest, ::testing::Range(1, 9));

}  // namespace
}  // namespace capsule::owned
