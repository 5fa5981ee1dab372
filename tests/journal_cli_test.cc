// The journal's commands through the real binary: capsule log append, log, verify, merge.
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"

namespace {

struct Outcome {
  int code = -1;
  std::string out, err;
};

std::string Scratch() {
  const char* root = std::getenv("TEST_TMPDIR");
  return root && *root ? root : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Runs a shell command line (the program is ./capsule), capturing its output.
Outcome Sh(const std::string& command) {
  static int counter = 0;
  std::string base = Scratch() + "/run" + std::to_string(++counter);
  int status = std::system(("(" + command + ") >" + base + ".out 2>" + base + ".err").c_str());
  Outcome run;
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  run.out = Slurp(base + ".out");
  run.err = Slurp(base + ".err");
  return run;
}

std::string Trim(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

class JournalCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = Scratch() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name();
    ASSERT_EQ(Sh("rm -rf " + dir_ + " && mkdir -p " + dir_).code, 0);
    cap_ = dir_ + "/cap";
    Outcome init = Sh("./capsule init " + cap_ + " --id agent-1 --name Agent");
    ASSERT_EQ(init.code, 0) << init.err;
  }
  Outcome Append(const std::string& cap, const std::string& type, const std::string& data) {
    return Sh("./capsule log append " + cap + " --type " + type + " --data '" + data + "'");
  }
  std::string dir_, cap_;
};

TEST_F(JournalCliTest, AppendGoodBadAndNotHeld) {
  Outcome good = Append(cap_, "user_message", R"({"text":"hello"})");
  ASSERT_EQ(good.code, 0) << good.err;
  EXPECT_EQ(Trim(good.out).size(), 64u);
  Outcome stdin_data = Sh("echo '{\"call_id\":\"c1\",\"name\":\"ls\",\"arguments\":{}}' | ./capsule log append " + cap_ +
                      " --type tool_call");
  EXPECT_EQ(stdin_data.code, 0) << stdin_data.err;

  Outcome bad_type = Append(cap_, "chat", R"({"text":"x"})");
  EXPECT_EQ(bad_type.code, 1);
  EXPECT_NE(bad_type.err.find("capsule: type chat: unknown event type"), std::string::npos) << bad_type.err;
  Outcome bad_data = Append(cap_, "tool_call", R"({"call_id":"c","name":"n","arguments":"x"})");
  EXPECT_EQ(bad_data.code, 1);
  EXPECT_EQ(bad_data.err, "capsule: tool_call: data.arguments: must be a JSON object\n");
  Outcome not_json = Append(cap_, "user_message", "{");
  EXPECT_EQ(not_json.code, 1);
  Outcome usage = Sh("./capsule log append " + cap_);
  EXPECT_EQ(usage.code, 2);

  ASSERT_EQ(Sh("sed -i s/active/frozen/ " + cap_ + "/.capsule/holder.json").code, 0);
  Outcome frozen = Append(cap_, "user_message", R"({"text":"late"})");
  EXPECT_EQ(frozen.code, 1);
  EXPECT_NE(frozen.err.find("frozen"), std::string::npos) << frozen.err;
  EXPECT_EQ(Sh("./capsule log " + cap_).code, 0);  // reading never needs the capsule held
  EXPECT_EQ(Sh("rm " + cap_ + "/.capsule/holder.json").code, 0);
  EXPECT_EQ(Append(cap_, "user_message", R"({"text":"late"})").code, 1);
}

// Hostile data is refused with a message naming what and why; the journal is untouched and
// the program never aborts.
TEST_F(JournalCliTest, HostileNumbersAndNestingAreRefusedNeverACrash) {
  std::string before = Slurp(cap_ + "/memory/timeline_events.jsonl");
  Outcome huge = Append(cap_, "user_message", R"({"text":"x","n":1e999})");
  EXPECT_EQ(huge.code, 1);
  EXPECT_NE(huge.err.find("the number 1e999 is too large for a double"), std::string::npos) << huge.err;
  Outcome wide = Append(cap_, "user_message", R"({"text":"x","n":123456789012345678901234567890})");
  EXPECT_EQ(wide.code, 1);
  EXPECT_NE(wide.err.find("does not fit in 64 bits"), std::string::npos) << wide.err;
  ASSERT_EQ(Sh("python3 -c 'print(\"{\\\"text\\\":\\\"x\\\",\\\"deep\\\":\" + \"[\" * 100000 + \"]\" * 100000 + "
               "\"}\")' > " + dir_ + "/deep.json").code, 0);
  Outcome deep = Sh("./capsule log append " + cap_ + " --type user_message < " + dir_ + "/deep.json");
  EXPECT_EQ(deep.code, 1);
  EXPECT_NE(deep.err.find("nested deeper than 256 levels"), std::string::npos) << deep.err;
  EXPECT_EQ(Slurp(cap_ + "/memory/timeline_events.jsonl"), before);
  EXPECT_EQ(Sh("./capsule verify " + cap_).code, 0);
}

TEST_F(JournalCliTest, LogHumanAndJson) {
  std::string first = Trim(Append(cap_, "user_message", R"({"text":"hello there"})").out);
  ASSERT_EQ(Append(cap_, "tool_call", R"({"call_id":"c1","name":"ls","arguments":{"path":"/"}})").code, 0);
  Outcome human = Sh("./capsule log " + cap_);
  ASSERT_EQ(human.code, 0) << human.err;
  std::string machine = Trim(Slurp(cap_ + "/.capsule/machine"));
  EXPECT_EQ(human.out, "1 " + machine + "#1 user_message hello there\n2 " + machine + "#2 tool_call ls\n");
  Outcome json = Sh("./capsule log " + cap_ + " --json");
  ASSERT_EQ(json.code, 0);
  EXPECT_EQ(json.out, Slurp(cap_ + "/memory/timeline_events.jsonl"));
  EXPECT_NE(json.out.find("\"id\":\"" + first + "\""), std::string::npos);
  EXPECT_EQ(Sh("./capsule log").code, 2);
}

TEST_F(JournalCliTest, VerifyAfterAppendsAndCatchesTampering) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Append(cap_, "user_message", R"({"text":"note )" + std::to_string(i) + "\"}").code, 0);
  Outcome ok = Sh("./capsule verify " + cap_);
  EXPECT_EQ(ok.code, 0) << ok.out << ok.err;
  std::string second = Trim(Sh("sed -n 2p " + cap_ + "/memory/timeline_events.jsonl | grep -o '\"id\":\"[0-9a-f]*' | cut -c7-").out);
  ASSERT_EQ(second.size(), 64u);
  ASSERT_EQ(Sh("sed -i 's/note 1/note X/' " + cap_ + "/memory/timeline_events.jsonl").code, 0);
  Outcome bad = Sh("./capsule verify " + cap_);
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.out.find(second), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("id does not match"), std::string::npos) << bad.out;
  EXPECT_EQ(Sh("./capsule log " + cap_).code, 1);
}

TEST_F(JournalCliTest, MergeOfDivergedCopies) {
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"shared"})").code, 0);
  std::string other = dir_ + "/other";
  ASSERT_EQ(Sh("cp -a " + cap_ + " " + other + " && ./capsule adopt " + other).code, 0);
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"here"})").code, 0);
  ASSERT_EQ(Append(other, "user_message", R"({"text":"there 1"})").code, 0);
  ASSERT_EQ(Append(other, "user_message", R"({"text":"there 2"})").code, 0);
  Outcome merge = Sh("./capsule merge " + cap_ + " " + other);
  ASSERT_EQ(merge.code, 0) << merge.err;
  EXPECT_NE(merge.out.find("2 events added, 4 in all"), std::string::npos) << merge.out;
  Outcome verify = Sh("./capsule verify " + cap_);
  EXPECT_EQ(verify.code, 0) << verify.out << verify.err;
  EXPECT_EQ(Sh("./capsule merge " + other + " " + cap_).code, 0);
  EXPECT_EQ(Slurp(cap_ + "/memory/timeline_events.jsonl"), Slurp(other + "/memory/timeline_events.jsonl"));
  EXPECT_EQ(Sh("./capsule verify " + other).code, 0);
  Outcome again = Sh("./capsule merge " + cap_ + " " + other);
  EXPECT_NE(again.out.find("0 events added"), std::string::npos) << again.out;
  // Appends go on after a merge, and the capsule still verifies.
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"after"})").code, 0);
  EXPECT_EQ(Sh("./capsule verify " + cap_).code, 0);
}

// cp -a of a held capsule made two folders with one machine id that both took appends, and
// their journals could never merge again. The copy now refuses writes, saying why and what to
// do, until it is adopted; a renamed folder is the same folder and stays held.
TEST_F(JournalCliTest, ACopiedCapsuleRefusesWritesUntilAdoptedAndThenMerges) {
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"shared"})").code, 0);
  std::string copy = dir_ + "/copy";
  ASSERT_EQ(Sh("cp -a " + cap_ + " " + copy).code, 0);
  Outcome refused = Append(copy, "user_message", R"({"text":"from the copy"})");
  EXPECT_EQ(refused.code, 1);
  EXPECT_NE(refused.err.find("is a copy of a capsule held elsewhere"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("capsule adopt " + copy), std::string::npos) << refused.err;
  EXPECT_EQ(Slurp(copy + "/memory/timeline_events.jsonl"), Slurp(cap_ + "/memory/timeline_events.jsonl"));
  Outcome not_a_copy = Sh("./capsule adopt " + cap_);
  EXPECT_EQ(not_a_copy.code, 1);
  EXPECT_NE(not_a_copy.err.find("is not a copy"), std::string::npos) << not_a_copy.err;

  // A rename keeps the folder: still held, still the same machine.
  std::string renamed = dir_ + "/renamed";
  ASSERT_EQ(Sh("mv " + cap_ + " " + renamed).code, 0);
  ASSERT_EQ(Append(renamed, "user_message", R"({"text":"original"})").code, 0) << "a renamed capsule stays held";

  Outcome adopted = Sh("./capsule adopt " + copy);
  ASSERT_EQ(adopted.code, 0) << adopted.err;
  EXPECT_NE(Slurp(copy + "/.capsule/machine"), Slurp(renamed + "/.capsule/machine"));
  EXPECT_NE(Slurp(copy + "/manifest.json").find(Trim(Slurp(copy + "/.capsule/machine"))), std::string::npos);
  ASSERT_EQ(Append(copy, "user_message", R"({"text":"from the copy"})").code, 0);
  EXPECT_EQ(Sh("./capsule verify " + copy).code, 0);
  Outcome merged = Sh("./capsule merge " + renamed + " " + copy);
  ASSERT_EQ(merged.code, 0) << merged.err;
  EXPECT_NE(merged.out.find("1 event added, 3 in all"), std::string::npos) << merged.out;
  EXPECT_EQ(Sh("./capsule verify " + renamed).code, 0);
}

TEST_F(JournalCliTest, MergeRefusesAForgedConflictingEvent) {
  // A copy that keeps this machine's id forges a second event at the same seq (its holder
  // record edited so that it no longer names the folder it was written in).
  std::string forged = dir_ + "/forged";
  ASSERT_EQ(Sh("cp -a " + cap_ + " " + forged + " && sed -i 's/\"folder\":\"[^\"]*\",//' " + forged +
               "/.capsule/holder.json").code,
            0);
  std::string mine = Trim(Append(cap_, "user_message", R"({"text":"real"})").out);
  std::string fake = Trim(Append(forged, "user_message", R"({"text":"fake"})").out);
  ASSERT_EQ(mine.size(), 64u);
  ASSERT_EQ(fake.size(), 64u);
  std::string before = Slurp(cap_ + "/memory/timeline_events.jsonl");
  Outcome merge = Sh("./capsule merge " + cap_ + " " + forged);
  EXPECT_EQ(merge.code, 1);
  EXPECT_NE(merge.err.find(mine), std::string::npos) << merge.err;
  EXPECT_NE(merge.err.find(fake), std::string::npos) << merge.err;
  EXPECT_EQ(Slurp(cap_ + "/memory/timeline_events.jsonl"), before);
}

// A damaged line is refused wherever it lies: in what only the other copy holds (named after
// that copy's folder), or in the history both copies hold (named as this journal's, the
// first one checked). Nothing is written either way.
TEST_F(JournalCliTest, MergeRefusesADamagedLineNamingTheJournalThatHoldsIt) {
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"shared"})").code, 0);
  std::string other = dir_ + "/other";
  ASSERT_EQ(Sh("cp -a " + cap_ + " " + other + " && ./capsule adopt " + other).code, 0);
  ASSERT_EQ(Append(cap_, "user_message", R"({"text":"here"})").code, 0);
  ASSERT_EQ(Append(other, "user_message", R"({"text":"there"})").code, 0);
  std::string journal = cap_ + "/memory/timeline_events.jsonl";
  std::string before = Slurp(journal);

  ASSERT_EQ(Sh("sed -i 's/\"there\"/\"THERE\"/' " + other + "/memory/timeline_events.jsonl").code, 0);
  Outcome theirs = Sh("./capsule merge " + cap_ + " " + other);
  EXPECT_EQ(theirs.code, 1);
  EXPECT_NE(theirs.err.find("the journal of " + other + ": journal: line 2"), std::string::npos) << theirs.err;
  EXPECT_NE(theirs.err.find("id does not match"), std::string::npos) << theirs.err;
  EXPECT_EQ(Slurp(journal), before);

  ASSERT_EQ(Sh("sed -i 's/\"THERE\"/\"there\"/; s/\"shared\"/\"SHARED\"/' " + other +
               "/memory/timeline_events.jsonl && sed -i 's/\"shared\"/\"SHARED\"/' " + journal).code,
            0);
  std::string damaged = Slurp(journal);
  Outcome both = Sh("./capsule merge " + cap_ + " " + other);
  EXPECT_EQ(both.code, 1);
  EXPECT_NE(both.err.find("merge: this journal: journal: line 1"), std::string::npos) << both.err;
  EXPECT_EQ(Slurp(journal), damaged);
}

}  // namespace
