// Property tests: random histories of 3-4 machines that diverge (copies of one capsule
// appending independently, merging now and then) and are merged in random orders. Every
// order and grouping gives the same bytes, every chain verifies, and no event is lost.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/test_util.h"

namespace capsule::journal {
namespace {

using testing::CopyCapsuleAs;
using testing::FixedTimeOptions;
using testing::MachineName;
using testing::MakeTempDir;
using testing::MakeTestCapsule;

std::string JournalText(const std::string& dir) { return *ReadFile(JoinPath(dir, kJournalPath)); }

std::set<std::string> Ids(const std::string& dir) {
  Result<std::vector<Event>> events = Journal::Read(dir);
  EXPECT_TRUE(events.ok()) << dir << ": " << events.status().message();
  std::set<std::string> ids;
  if (events.ok()) {
    for (const Event& event : *events) ids.insert(event.id);
  }
  return ids;
}

Journal OpenOrDie(const std::string& dir) {
  Result<Journal> journal = Journal::OpenForWrite(dir, FixedTimeOptions(false));
  EXPECT_TRUE(journal.ok()) << journal.status().message();
  return std::move(journal).value();
}

Json RandomData(std::mt19937& rng, int n) {
  switch (rng() % 3) {
    case 0: return {{"text", "message " + std::to_string(n)}};
    case 1: return {{"text", "note " + std::to_string(n)}, {"conversation", "side"}};
    default: return {{"text", std::string(rng() % 40, 'x')}};
  }
}

class MergePropertyTest : public ::testing::TestWithParam<int> {};

TEST_P(MergePropertyTest, AllMergeOrdersGiveTheSameBytesAndLoseNothing) {
  const int seed = GetParam();
  std::mt19937 rng(seed);
  const int machines = 3 + seed % 2;
  std::string root = MakeTempDir("merge");
  std::vector<std::string> dirs;
  dirs.push_back(root + "/m1");
  ASSERT_TRUE(MakeTestCapsule(dirs[0], MachineName(1)).ok());
  {
    Journal first = OpenOrDie(dirs[0]);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(first.Append("user_message", RandomData(rng, i)).ok());
  }
  for (int m = 2; m <= machines; ++m) {
    dirs.push_back(root + "/m" + std::to_string(m));
    ASSERT_TRUE(CopyCapsuleAs(dirs[0], dirs.back(), MachineName(m)).ok());
  }

  // Diverge: random appends on random machines, with an occasional one-way merge.
  int counter = 0;
  for (int round = 0; round < 40; ++round) {
    size_t m = rng() % dirs.size();
    if (rng() % 6 == 0) {
      size_t from = rng() % dirs.size();
      Journal journal = OpenOrDie(dirs[m]);
      ASSERT_TRUE(journal.MergeFrom(*Journal::Read(dirs[from])).ok());
      continue;
    }
    Journal journal = OpenOrDie(dirs[m]);
    int count = 1 + rng() % 4;
    for (int i = 0; i < count; ++i) ASSERT_TRUE(journal.Append("user_message", RandomData(rng, ++counter)).ok());
  }
  std::set<std::string> all;
  for (const std::string& dir : dirs) {
    ASSERT_TRUE(Journal::Verify(dir).ok());
    std::set<std::string> ids = Ids(dir);
    all.insert(ids.begin(), ids.end());
  }

  // Merge everything, in random orders, into fresh copies of a random starting machine.
  std::string expected;
  std::vector<size_t> order(dirs.size());
  for (int trial = 0; trial < 6; ++trial) {
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::string target = root + "/order" + std::to_string(trial);
    ASSERT_TRUE(CopyCapsuleAs(dirs[order[0]], target, MachineName(order[0] + 1)).ok());
    Journal journal = OpenOrDie(target);
    for (size_t i = 1; i < order.size(); ++i) ASSERT_TRUE(journal.MergeFrom(*Journal::Read(dirs[order[i]])).ok());
    // Merging again changes nothing (idempotent).
    ASSERT_EQ(journal.MergeFrom(*Journal::Read(dirs[order[1]]))->added, 0u);
    ASSERT_TRUE(Journal::Verify(target).ok());
    EXPECT_EQ(Ids(target), all);
    std::string bytes = JournalText(target);
    if (trial == 0) expected = bytes;
    EXPECT_EQ(bytes, expected) << "merge order differs at trial " << trial;
  }

  // Grouped differently: (a + b) + (c + d ...), associativity.
  std::string left = root + "/left", right = root + "/right";
  ASSERT_TRUE(CopyCapsuleAs(dirs[0], left, MachineName(1)).ok());
  ASSERT_TRUE(CopyCapsuleAs(dirs[2], right, MachineName(3)).ok());
  Journal left_journal = OpenOrDie(left), right_journal = OpenOrDie(right);
  ASSERT_TRUE(left_journal.MergeFrom(*Journal::Read(dirs[1])).ok());
  for (size_t i = 3; i < dirs.size(); ++i) ASSERT_TRUE(right_journal.MergeFrom(*Journal::Read(dirs[i])).ok());
  ASSERT_TRUE(left_journal.MergeFrom(*Journal::Read(right)).ok());
  EXPECT_EQ(JournalText(left), expected);

  // The merged journal still takes appends, and the capsule's manifest still verifies.
  EXPECT_TRUE(left_journal.Append("user_message", {{"text", "after"}}).ok());
  EXPECT_TRUE(Journal::Verify(left).ok());
}

INSTANTIATE_TEST_SUITE_P(Seeds, MergePropertyTest, ::testing::Range(1, 9));

TEST(MergeConflictTest, ForgedEventWithSameMachineAndSeqIsRefusedNamingBoth) {
  std::string root = MakeTempDir("conflict");
  ASSERT_TRUE(MakeTestCapsule(root + "/a", MachineName(1)).ok());
  ASSERT_TRUE(CopyCapsuleAs(root + "/a", root + "/b", MachineName(1)).ok());  // the same machine id twice
  Journal a = OpenOrDie(root + "/a"), b = OpenOrDie(root + "/b");
  Event mine = *a.Append("user_message", {{"text", "one"}});
  Event forged = *b.Append("user_message", {{"text", "two"}});
  std::string before = JournalText(root + "/a");
  Result<MergeResult> merged = a.MergeFrom(*Journal::Read(root + "/b"));
  ASSERT_EQ(merged.status().code(), Code::kCorruption);
  EXPECT_NE(merged.status().message().find(mine.id), std::string::npos) << merged.status().message();
  EXPECT_NE(merged.status().message().find(forged.id), std::string::npos) << merged.status().message();
  EXPECT_EQ(JournalText(root + "/a"), before);
}

TEST(MergeConflictTest, BrokenOtherSideIsRefused) {
  std::string root = MakeTempDir("broken");
  ASSERT_TRUE(MakeTestCapsule(root + "/a", MachineName(1)).ok());
  Journal a = OpenOrDie(root + "/a");
  Event one = *a.Append("user_message", {{"text", "one"}});
  Event two = *a.Append("user_message", {{"text", "two"}});
  std::vector<Event> gap = {two};  // seq 2 without seq 1
  Result<MergeResult> merged = a.MergeFrom(gap);
  EXPECT_EQ(merged.status().code(), Code::kCorruption);
  EXPECT_NE(merged.status().message().find("the other journal"), std::string::npos) << merged.status().message();
  Event edited = one;
  edited.data["text"] = "edited";  // id no longer matches
  merged = a.MergeFrom({edited, two});
  EXPECT_EQ(merged.status().code(), Code::kCorruption);
  EXPECT_NE(merged.status().message().find("id does not match"), std::string::npos) << merged.status().message();
}

}  // namespace
}  // namespace capsule::journal
