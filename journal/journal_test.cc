// Append, read, torn tails, the tail cache, concurrent appenders, and tamper detection.
#include "journal/journal.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/base/scoped_limit.h"
#include "capsule/format/holder.h"
#include "capsule/format/layout.h"
#include "capsule/format/manifest.h"
#include "capsule/format/verify.h"
#include "journal/check.h"
#include "journal/merge_text.h"
#include "journal/test_util.h"

namespace capsule::journal {
namespace {

using testing::CopyCapsuleAs;
using testing::FixedTimeOptions;
using testing::MachineName;
using testing::MakeTempDir;
using testing::MakeTestCapsule;

std::string JournalText(const std::string& dir) { return *ReadFile(JoinPath(dir, kJournalPath)); }

Json Text(const std::string& text) { return {{"text", text}}; }

class JournalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("journal") + "/capsule";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
  }
  Journal Open(const std::string& dir) {
    Result<Journal> journal = Journal::OpenForWrite(dir, FixedTimeOptions(false));
    EXPECT_TRUE(journal.ok()) << journal.status().message();
    return std::move(journal).value();
  }
  std::string dir_;
};

TEST_F(JournalTest, AppendAssignsSeqPrevClockAndId) {
  Journal journal = Open(dir_);
  Event first = *journal.Append("user_message", Text("hi"));
  Event second = *journal.Append("assistant_message", {{"text", "hello"}, {"provider", "openai"}, {"model", "x"}});
  EXPECT_EQ(first.seq, 1u);
  EXPECT_FALSE(first.prev.has_value());
  EXPECT_EQ(first.clock, 1u);
  EXPECT_EQ(first.machine, MachineName(1));
  EXPECT_EQ(first.ts, "2026-12-02T16:40:00Z");
  EXPECT_EQ(second.seq, 2u);
  EXPECT_EQ(second.prev, first.id);
  EXPECT_EQ(second.clock, 2u);
  EXPECT_EQ(JournalText(dir_), *first.CanonicalLine() + "\n" + *second.CanonicalLine() + "\n");
  Result<std::vector<Event>> events = Journal::Read(dir_);
  ASSERT_TRUE(events.ok());
  ASSERT_EQ(events->size(), 2u);
  EXPECT_EQ((*events)[1].id, second.id);
  EXPECT_TRUE(Journal::Verify(dir_).ok());
}

TEST_F(JournalTest, AppendRefusesBadDataAndUnheldCapsule) {
  Journal journal = Open(dir_);
  Result<Event> bad = journal.Append("tool_call", {{"call_id", "c"}, {"name", "n"}, {"arguments", 1}});
  EXPECT_EQ(bad.status().message(), "tool_call: data.arguments: must be a JSON object");
  EXPECT_EQ(JournalText(dir_), "");

  HolderRecord holder = *HolderRecord::Load(dir_);
  holder.state = HolderState::kFrozen;
  ASSERT_TRUE(holder.Save(dir_).ok());
  EXPECT_EQ(journal.Append("user_message", Text("x")).status().code(), Code::kFailedPrecondition);
  // A frozen capsule opens (a mount of it waits for its thaw) but takes no append.
  Result<Journal> frozen = Journal::OpenForWrite(dir_);
  ASSERT_TRUE(frozen.ok()) << frozen.status().ToString();
  EXPECT_EQ(frozen->Append("user_message", Text("x")).status().code(), Code::kFailedPrecondition);
  holder.state = HolderState::kRetired;
  ASSERT_TRUE(holder.Save(dir_).ok());
  EXPECT_EQ(Journal::OpenForWrite(dir_).status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(JournalText(dir_), "");
  EXPECT_TRUE(Journal::Read(dir_).ok());  // reading never needs the capsule held
}

TEST_F(JournalTest, TornTailIsIgnoredByReadersAndCutByWriters) {
  {
    Journal journal = Open(dir_);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(journal.Append("user_message", Text("m" + std::to_string(i))).ok());
  }
  std::string whole = JournalText(dir_);
  std::string torn = whole + whole.substr(0, 40);  // a crash mid-append
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kJournalPath), torn).ok());
  EXPECT_EQ(Journal::Read(dir_)->size(), 3u);
  EXPECT_TRUE(CheckJournalText(torn).empty());
  Journal journal = Open(dir_);
  EXPECT_EQ(JournalText(dir_), whole);
  Event next = *journal.Append("user_message", Text("after"));
  EXPECT_EQ(next.seq, 4u);
  EXPECT_TRUE(Journal::Verify(dir_).ok());
}

TEST_F(JournalTest, MalformedCompleteLineIsCorruption) {
  Journal journal = Open(dir_);
  ASSERT_TRUE(journal.Append("user_message", Text("a")).ok());
  std::string text = JournalText(dir_) + "{\"type\":\"user_message\"}\n";
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kJournalPath), text).ok());  // new inode: cache misses
  EXPECT_EQ(Journal::Read(dir_).status().code(), Code::kCorruption);
  Result<Event> refused = journal.Append("user_message", Text("b"));
  EXPECT_EQ(refused.status().code(), Code::kCorruption);
  EXPECT_NE(refused.status().message().find("journal: line 2"), std::string::npos) << refused.status().message();
}

TEST_F(JournalTest, TailCacheMissingOrDamagedFallsBackToReading) {
  Journal journal = Open(dir_);
  ASSERT_TRUE(journal.Append("user_message", Text("a")).ok());
  std::string cache = JoinPath(dir_, local::kJournalTail);
  ASSERT_TRUE(PathExists(cache));
  ASSERT_TRUE(WriteFileAtomic(cache, "garbage").ok());
  EXPECT_EQ(journal.Append("user_message", Text("b"))->seq, 2u);
  ::unlink(cache.c_str());
  EXPECT_EQ(journal.Append("user_message", Text("c"))->seq, 3u);
  EXPECT_TRUE(Journal::Verify(dir_).ok());
}

// Overwrites bytes of the journal in place (same inode, same size), as a disk fault would.
void DamageInPlace(const std::string& dir, uint64_t offset, const std::string& bytes) {
  UniqueFd fd = *OpenFile(JoinPath(dir, kJournalPath), O_WRONLY);
  ASSERT_EQ(::pwrite(fd.get(), bytes.data(), bytes.size(), static_cast<off_t>(offset)),
            static_cast<ssize_t>(bytes.size()));
}

// The tail cache is written every few appends; a writer opening the journal afterwards trusts
// what it covers and reads only the lines appended since.
TEST_F(JournalTest, StaleTailCacheIsContinuedFromWhereItEnds) {
  Journal first = Open(dir_);
  std::vector<Event> written;
  for (int i = 0; i < 5; ++i) written.push_back(*first.Append("user_message", Text("m" + std::to_string(i))));
  // `first` is still open: the cache covers its first append only.
  Journal second = Open(dir_);
  Result<Event> next = second.Append("user_message", Text("from the second"));
  ASSERT_TRUE(next.ok()) << next.status().message();
  EXPECT_EQ(next->seq, 6u);
  EXPECT_EQ(next->prev, written.back().id);
  EXPECT_EQ(next->clock, written.back().clock + 1);
  EXPECT_TRUE(Journal::Verify(dir_).ok());
  // `second`'s append wrote the cache: it covers 6 lines. A fault after them is found (and
  // named by a whole read).
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(first.Append("user_message", Text("n" + std::to_string(i))).ok());
  std::string text = JournalText(dir_);
  size_t eighth = 0;
  for (int i = 0; i < 7; ++i) eighth = text.find('\n', eighth) + 1;
  DamageInPlace(dir_, eighth + text.substr(eighth).find("\"text\":\"") + 8, "X");
  Journal third = Open(dir_);
  Result<Event> refused = third.Append("user_message", Text("refused"));
  EXPECT_EQ(refused.status().code(), Code::kCorruption);
  EXPECT_NE(refused.status().message().find("journal: line 8"), std::string::npos) << refused.status().message();
}

// A Journal leaves the cache covering every line it appended when it closes.
TEST_F(JournalTest, ClosingAWriterBringsTheTailCacheUpToDate) {
  {
    Journal journal = Open(dir_);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(journal.Append("user_message", Text("m" + std::to_string(i))).ok());
  }
  // Damage the second line in place: a cache covering all three lines is trusted as it is;
  // one covering the first line only would make the next writer read (and refuse) the second.
  std::string text = JournalText(dir_);
  size_t second = text.find('\n') + 1;
  DamageInPlace(dir_, second + text.substr(second).find("\"text\":\"") + 8, "X");
  Journal next = Open(dir_);
  Result<Event> appended = next.Append("user_message", Text("after"));
  ASSERT_TRUE(appended.ok()) << appended.status().message();
  EXPECT_EQ(appended->seq, 4u);
}

TEST_F(JournalTest, TwoProcessesAppendingAtOnceLoseNothing) {
  constexpr int kPerChild = 150;
  pid_t children[2];
  for (pid_t& child : children) {
    child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      Result<Journal> journal = Journal::OpenForWrite(dir_, FixedTimeOptions(false));
      if (!journal.ok()) ::_exit(2);
      for (int i = 0; i < kPerChild; ++i) {
        if (!journal->Append("user_message", Text(std::to_string(::getpid()) + "/" + std::to_string(i))).ok()) ::_exit(3);
      }
      ::_exit(0);
    }
  }
  for (pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  Result<std::vector<Event>> events = Journal::Read(dir_);
  ASSERT_TRUE(events.ok()) << events.status().message();
  ASSERT_EQ(events->size(), 2u * kPerChild);
  EXPECT_EQ(events->back().seq, 2u * kPerChild);
}

TEST_F(JournalTest, RepeatedMergeFinishesOneCutShortBeforeItsManifestUpdate) {
  std::string other = DirName(dir_) + "/other";
  ASSERT_TRUE(CopyCapsuleAs(dir_, other, MachineName(2)).ok());
  Journal here = Open(dir_), there = Open(other);
  ASSERT_TRUE(here.Append("user_message", Text("here 1")).ok());
  ASSERT_TRUE(here.Append("user_message", Text("here 2")).ok());  // clock 2
  ASSERT_TRUE(there.Append("user_message", Text("there")).ok());   // clock 1: sorts before "here 2"
  // A manifest whose digest covers the whole journal as it is now.
  Manifest manifest = *Manifest::Load(dir_);
  ASSERT_TRUE(RefreshManifestEntries(dir_, {kJournalPath}, &manifest).ok());
  ASSERT_TRUE(manifest.Save(dir_).ok());
  std::string manifest_before = *ReadFile(JoinPath(dir_, kManifestPath));
  ASSERT_EQ(here.MergeFrom(*Journal::Read(other))->added, 1u);  // rewrites the journal in a new order
  VerifyOptions options;
  options.check_journal = CheckJournalAt;
  EXPECT_TRUE(VerifyFolder(dir_, options)->ok());
  // The crash: the journal was renamed into place, the manifest not yet rewritten.
  ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, kManifestPath), manifest_before).ok());
  EXPECT_FALSE(VerifyFolder(dir_, options)->ok());
  EXPECT_EQ(here.MergeFrom(*Journal::Read(other))->added, 0u);
  Result<VerifyReport> report = VerifyFolder(dir_, options);
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << (report->problems.empty() ? "" : report->problems[0]);
}

TEST_F(JournalTest, MergeOfFilesThroughSmallBlocksEqualsTheMergeOfTheTexts) {
  // A shared history, then each copy its own events, clocks interleaved; merged through
  // blocks of about two lines, so that every line is near a block's edge once.
  std::string other = DirName(dir_) + "/other";
  {
    Journal first = Open(dir_);
    for (int i = 0; i < 60; ++i) ASSERT_TRUE(first.Append("user_message", Text("before " + std::to_string(i))).ok());
  }
  ASSERT_TRUE(CopyCapsuleAs(dir_, other, MachineName(2)).ok());
  JournalOptions options = FixedTimeOptions(false);
  options.merge_block_bytes = 700;
  Journal here = std::move(Journal::OpenForWrite(dir_, options)).value();
  Journal there = std::move(Journal::OpenForWrite(other, options)).value();
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(here.Append("user_message", Text("here " + std::to_string(i))).ok());
    ASSERT_TRUE(there.Append("user_message", Text(std::string(static_cast<size_t>(i) * 37, 'x'))).ok());
  }
  std::string here_text = JournalText(dir_), there_text = JournalText(other);
  Result<std::string> expected = MergeJournalTexts(here_text, there_text);
  ASSERT_TRUE(expected.ok()) << expected.status().message();

  Result<MergeResult> merged = here.MergeFrom(*OtherJournal::Load(other));
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(merged->added, 40u);
  EXPECT_EQ(merged->total, 140u);
  EXPECT_EQ(JournalText(dir_), *expected);
  VerifyOptions verify;
  verify.check_journal = CheckJournalAt;
  Result<VerifyReport> report = VerifyFolder(dir_, verify);  // the manifest's digest is the merged text's
  ASSERT_TRUE(report.ok());
  EXPECT_TRUE(report->ok()) << (report->problems.empty() ? "" : report->problems[0]);

  // Nothing more to add: the journal is left as it is, and no temporary file stays behind.
  merged = here.MergeFrom(*OtherJournal::Load(other));
  ASSERT_TRUE(merged.ok());
  EXPECT_EQ(merged->added, 0u);
  EXPECT_EQ(JournalText(dir_), *expected);
  Result<std::vector<std::string>> names = ListFileNames(DirName(JoinPath(dir_, kJournalPath)));
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;

  // The other way round gives the same bytes, and appends go on after it.
  ASSERT_EQ(there.MergeFrom(*OtherJournal::Load(dir_))->added, 40u);
  EXPECT_EQ(JournalText(other), *expected);
  ASSERT_TRUE(there.Append("user_message", Text("after")).ok());
  EXPECT_TRUE(Journal::Verify(other).ok());
}

TEST_F(JournalTest, MergeThatCannotWriteChangesNothing) {
  std::string other = DirName(dir_) + "/other";
  ASSERT_TRUE(CopyCapsuleAs(dir_, other, MachineName(2)).ok());
  JournalOptions options = FixedTimeOptions(false);
  options.merge_block_bytes = 256 << 10;
  Journal here = std::move(Journal::OpenForWrite(dir_, options)).value();
  Journal there = std::move(Journal::OpenForWrite(other, options)).value();
  for (int i = 0; i < 5000; ++i) {  // about 6 MB each, clocks interleaved
    ASSERT_TRUE(here.Append("user_message", Text(std::to_string(i) + std::string(1000, 'h'))).ok());
    ASSERT_TRUE(there.Append("user_message", Text(std::to_string(i) + std::string(1000, 't'))).ok());
  }
  std::string before = JournalText(dir_);
  std::string manifest_before = *ReadFile(JoinPath(dir_, kManifestPath));

  // Files may not grow past 2 MiB: the merged journal's writes fail (EFBIG) after megabytes of
  // it went to the digest, pieces of the blocks being read.
  Result<MergeResult> merged = [&] {
    ::capsule::testing::ScopedLimit small_files(RLIMIT_FSIZE, 2 << 20);
    EXPECT_TRUE(small_files.ok());
    return here.MergeFrom(*OtherJournal::Load(other));
  }();
  ASSERT_FALSE(merged.ok());
  EXPECT_EQ(merged.status().code(), Code::kIOError) << merged.status().message();
  EXPECT_NE(merged.status().message().find(kJournalPath), std::string::npos) << merged.status().message();
  EXPECT_EQ(JournalText(dir_), before);
  EXPECT_EQ(*ReadFile(JoinPath(dir_, kManifestPath)), manifest_before);
  Result<std::vector<std::string>> names = ListFileNames(DirName(JoinPath(dir_, kJournalPath)));
  ASSERT_TRUE(names.ok());
  for (const std::string& name : *names) EXPECT_EQ(name.find(".tmp"), std::string::npos) << name;

  // With room, the same merge goes through.
  merged = here.MergeFrom(*OtherJournal::Load(other));
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_EQ(merged->added, 5000u);
  EXPECT_TRUE(Journal::Verify(dir_).ok());
}

// Tampering with one event of a journal of three machines: verify names it.
class TamperTest : public JournalTest {
 protected:
  void SetUp() override {
    JournalTest::SetUp();
    std::string root = DirName(dir_);
    ASSERT_TRUE(CopyCapsuleAs(dir_, root + "/b", MachineName(2)).ok());
    ASSERT_TRUE(CopyCapsuleAs(dir_, root + "/c", MachineName(3)).ok());
    Journal a = Open(dir_), b = Open(root + "/b"), c = Open(root + "/c");
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(a.Append("user_message", Text("a" + std::to_string(i))).ok());
      ASSERT_TRUE(b.Append("user_message", Text("b" + std::to_string(i))).ok());
      ASSERT_TRUE(c.Append("user_message", Text("c" + std::to_string(i))).ok());
    }
    ASSERT_TRUE(a.MergeFrom(*Journal::Read(root + "/b")).ok());
    ASSERT_TRUE(a.MergeFrom(*Journal::Read(root + "/c")).ok());
    text_ = JournalText(dir_);
    ASSERT_TRUE(CheckJournalText(text_).empty());
    size_t start = 0;
    while (start < text_.size()) {
      size_t end = text_.find('\n', start);
      lines_.push_back(text_.substr(start, end - start));
      start = end + 1;
    }
    ASSERT_EQ(lines_.size(), 12u);
  }
  std::string Join(const std::vector<std::string>& lines) {
    std::string out;
    for (const std::string& line : lines) out += line + "\n";
    return out;
  }
  std::string Check(const std::vector<std::string>& lines) {
    std::vector<std::string> problems = CheckJournalText(Join(lines));
    EXPECT_EQ(problems.size(), 1u);
    return problems.empty() ? "" : problems[0];
  }
  Event At(size_t i) { return *ParseEventLine(lines_[i], "line"); }
  std::string text_;
  std::vector<std::string> lines_;
};

TEST_F(TamperTest, EditIsCaught) {
  std::vector<std::string> lines = lines_;
  lines[5].replace(lines[5].find("\"text\":\"") + 8, 1, "X");
  std::string problem = Check(lines);
  EXPECT_NE(problem.find("line 6"), std::string::npos) << problem;
  EXPECT_NE(problem.find(At(5).id), std::string::npos) << problem;
  EXPECT_NE(problem.find("id does not match"), std::string::npos) << problem;
}

TEST_F(TamperTest, DropIsCaught) {
  std::vector<std::string> lines = lines_;
  Event dropped = At(4);
  lines.erase(lines.begin() + 4);
  std::string problem = Check(lines);
  // The dropped event's successor on the same machine is named.
  EXPECT_NE(problem.find("machine " + dropped.machine + ", seq " + std::to_string(dropped.seq + 1)), std::string::npos)
      << problem;
  EXPECT_NE(problem.find("follows seq " + std::to_string(dropped.seq - 1)), std::string::npos) << problem;
}

TEST_F(TamperTest, ReorderIsCaught) {
  std::vector<std::string> lines = lines_;
  std::swap(lines[3], lines[7]);
  std::string problem = Check(lines);
  // The first event out of place is the one moved up: its chain skips a seq here.
  EXPECT_NE(problem.find(At(7).id), std::string::npos) << problem;
  // Two adjacent events of different machines swapped: only the order is wrong.
  lines = lines_;
  size_t i = 0;
  while (At(i).machine == At(i + 1).machine) ++i;
  std::swap(lines[i], lines[i + 1]);
  problem = Check(lines);
  EXPECT_NE(problem.find(At(i).id), std::string::npos) << problem;
  EXPECT_NE(problem.find("out of order"), std::string::npos) << problem;
}

// The check a block at a time (VerifyJournalAt) finds what the whole text's check finds, named
// the same, whatever the block size; a sound journal is read once, never twice.
TEST_F(TamperTest, BlockwiseCheckAgreesWithTheWholeText) {
  auto edit = [&](std::vector<std::string> lines) {
    lines[9].replace(lines[9].find("\"text\":\"") + 8, 1, "X");
    return lines;
  };
  auto drop = [&](std::vector<std::string> lines) {
    lines.erase(lines.begin() + 8);
    return lines;
  };
  auto repeat_early = [&](std::vector<std::string> lines) {
    lines.insert(lines.begin() + 10, lines[1]);
    return lines;
  };
  auto swap = [&](std::vector<std::string> lines) {
    std::swap(lines[2], lines[11]);
    return lines;
  };
  auto swap_neighbours = [&](std::vector<std::string> lines) {  // only the order is wrong
    size_t i = 0;
    while (At(i).machine == At(i + 1).machine) ++i;
    std::swap(lines[i], lines[i + 1]);
    return lines;
  };
  std::vector<std::pair<std::string, std::string>> journals = {
      {"sound", text_},
      {"torn tail", text_ + lines_[0].substr(0, 40)},
      {"edited", Join(edit(lines_))},
      {"dropped", Join(drop(lines_))},
      {"repeated from an earlier block", Join(repeat_early(lines_))},
      {"swapped", Join(swap(lines_))},
      {"neighbours swapped", Join(swap_neighbours(lines_))},
      {"not json", text_ + "{not json\n"},
  };
  for (const auto& [name, text] : journals) {
    Status whole = VerifyJournalText(text);
    for (size_t block : {size_t{1}, size_t{97}, lines_[0].size() + 1, size_t{1000}, size_t{1} << 20}) {
      SCOPED_TRACE(name + ", block " + std::to_string(block));
      uint64_t bytes_read = 0;
      ReadAtFunction counted = [&](uint64_t offset, char* buffer, size_t size) -> Result<size_t> {
        Result<size_t> n = TextReadAt(text)(offset, buffer, size);
        if (n.ok()) bytes_read += *n;
        return n;
      };
      Status blockwise = VerifyJournalAt(counted, block);
      EXPECT_EQ(blockwise.ok(), whole.ok());
      EXPECT_EQ(blockwise.message(), whole.message());
      if (whole.ok()) {
        EXPECT_EQ(bytes_read, text.size());  // no second reading
      }
    }
    if (name != "sound" && name != "torn tail") {
      EXPECT_FALSE(whole.ok()) << name;
    }
  }
}

TEST_F(TamperTest, DuplicateIsCaught) {
  std::vector<std::string> lines = lines_;
  lines.insert(lines.begin() + 6, lines[6]);
  std::string problem = Check(lines);
  EXPECT_NE(problem.find(At(6).id), std::string::npos) << problem;
  EXPECT_NE(problem.find("duplicate"), std::string::npos) << problem;
}

TEST_F(TamperTest, RechainIsCaught) {
  // Event at line 8 re-chained to point at its machine's first event, with a fresh valid id.
  std::vector<std::string> lines = lines_;
  Event event = At(8);
  ASSERT_GE(event.seq, 3u);
  for (size_t i = 0; i < lines_.size(); ++i) {
    Event other = At(i);
    if (other.machine == event.machine && other.seq == 1) event.prev = other.id;
  }
  event.id = *event.ComputeId();
  lines[8] = *event.CanonicalLine();
  std::string problem = Check(lines);
  EXPECT_NE(problem.find(event.id), std::string::npos) << problem;
  EXPECT_NE(problem.find("prev does not link to seq " + std::to_string(event.seq - 1)), std::string::npos) << problem;
}

TEST_F(TamperTest, ForgedClockIsCaught) {
  // A machine's clock going backward along its chain, with a valid id and a consistent order.
  std::vector<std::string> lines = lines_;
  Event last = At(11);
  Event earlier;
  for (size_t i = 0; i < 11; ++i) {
    if (At(i).machine == last.machine && At(i).seq == last.seq - 1) earlier = At(i);
  }
  last.clock = earlier.clock;
  last.id = *last.ComputeId();
  lines[11] = *last.CanonicalLine();
  std::string problem = Check(lines);
  EXPECT_NE(problem.find(last.id), std::string::npos) << problem;
}


// A journal checked once and then grown is checked by its new lines alone, with the same
// verdict as a check of the whole, at every split point; a prefix that changed since is
// checked whole again.
TEST_F(TamperTest, GrowthIsCheckedLikeTheWhole) {
  Result<CheckedJournal> whole = CheckJournal(text_);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->lines, 12u);
  EXPECT_EQ(whole->size, text_.size());
  std::vector<std::vector<std::string>> tampered;
  {
    // The tamperings the tests above catch; a split before one checks it as growth, a split
    // after one finds the checked bytes changed and checks the whole.
    std::vector<std::string> dropped = lines_;
    dropped.erase(dropped.begin() + 4);
    tampered.push_back(dropped);
    std::vector<std::string> duplicated = lines_;
    duplicated.insert(duplicated.begin() + 6, duplicated[6]);
    tampered.push_back(duplicated);
    std::vector<std::string> edited = lines_;
    edited[5].replace(edited[5].find("\"text\":\"") + 8, 1, "X");
    tampered.push_back(edited);
    std::vector<std::string> swapped = lines_;
    std::swap(swapped[3], swapped[7]);
    tampered.push_back(swapped);
  }
  for (size_t split = 0; split <= 8; ++split) {
    std::vector<std::string> head(lines_.begin(), lines_.begin() + split);
    Result<CheckedJournal> checked = CheckJournal(Join(head));
    ASSERT_TRUE(checked.ok());
    std::vector<std::string> added;
    auto collect = [](std::vector<std::string>* ids) {
      return [ids](const EventLine& line) {
        ids->emplace_back(line.id);
        return Status::Ok();
      };
    };
    Result<CheckedJournal> grown = CheckJournalGrowth(*checked, text_, collect(&added));
    ASSERT_TRUE(grown.ok()) << "split " << split << ": " << grown.status().ToString();
    EXPECT_EQ(added.size(), 12 - split) << "only the new lines are read";
    if (!added.empty()) {
      EXPECT_EQ(added.back(), whole->last->id);
    }
    EXPECT_EQ(grown->size, whole->size);
    EXPECT_EQ(grown->sha256, whole->sha256);
    EXPECT_EQ(grown->lines, whole->lines);
    EXPECT_EQ(grown->tail.max_clock, whole->tail.max_clock);
    EXPECT_EQ(grown->last->id, whole->last->id);
    for (const auto& [machine, tail] : whole->tail.machines) EXPECT_EQ(grown->tail.machines[machine].id, tail.id);
    // The same from the appended bytes alone (a switch that carried only them).
    std::vector<std::string> appended_events;
    Result<CheckedJournal> appended = CheckJournalAppended(*checked, text_.substr(checked->size), collect(&appended_events));
    ASSERT_TRUE(appended.ok()) << "split " << split << ": " << appended.status().ToString();
    EXPECT_EQ(appended_events.size(), 12 - split);
    EXPECT_EQ(appended->size, whole->size);
    EXPECT_EQ(appended->sha256, whole->sha256);
    EXPECT_EQ(appended->lines, whole->lines);
    EXPECT_EQ(appended->last->id, whole->last->id);
    ASSERT_NE(appended->hasher, nullptr);
    EXPECT_EQ(Sha256(*appended->hasher).FinishHex(), whole->sha256) << "the state continues after every byte";
    // The same read from a file-like source in blocks smaller than a line: the lines given
    // in order, once each, the digest of the bytes across the blocks' seams.
    for (size_t block : {size_t{1}, size_t{100}, size_t{4096}}) {
      std::vector<std::string> read_ids;
      Result<CheckedJournal> at = CheckJournalGrowthAt(*checked, TextReadAt(text_), collect(&read_ids), block);
      ASSERT_TRUE(at.ok()) << "split " << split << ", block " << block << ": " << at.status().ToString();
      EXPECT_EQ(read_ids, added) << "block " << block;
      EXPECT_EQ(at->sha256, whole->sha256) << "block " << block;
      EXPECT_EQ(at->size, whole->size);
      EXPECT_EQ(at->lines, whole->lines);
      std::vector<std::string> appended_ids;
      Result<CheckedJournal> appended_at = CheckJournalAppendedAt(*checked, TextReadAt(text_), collect(&appended_ids), block);
      ASSERT_TRUE(appended_at.ok()) << appended_at.status().ToString();
      EXPECT_EQ(appended_ids, added);
      EXPECT_EQ(appended_at->sha256, whole->sha256);
    }
    // A visitor's error stops the check and is its verdict.
    if (split < 12) {
      Result<CheckedJournal> stopped = CheckJournalGrowth(*checked, text_, [](const EventLine&) {
        return Status::FailedPrecondition("visitor", "no more");
      });
      EXPECT_EQ(stopped.status().code(), Code::kFailedPrecondition);
    }
    for (const std::vector<std::string>& lines : tampered) {
      if (!std::equal(head.begin(), head.end(), lines.begin())) continue;  // only appends are checked so
      std::string tail = Join(lines).substr(checked->size);
      Result<CheckedJournal> bad_append = CheckJournalAppended(*checked, tail);
      EXPECT_FALSE(bad_append.ok()) << "split " << split;
    }
    for (const std::vector<std::string>& lines : tampered) {
      Result<CheckedJournal> bad = CheckJournalGrowth(*checked, Join(lines));
      ASSERT_FALSE(bad.ok()) << "split " << split;
      EXPECT_EQ(bad.status().message(), Check(lines)) << "split " << split;
    }
  }
  EXPECT_EQ(CheckJournalAppended(CheckedJournal{}, text_).status().code(), Code::kFailedPrecondition)
      << "a check without a digest state cannot be continued";
  // The checked prefix itself changed (an edit in line 2): the whole text is checked again.
  Result<CheckedJournal> head = CheckJournal(Join({lines_.begin(), lines_.begin() + 6}));
  std::vector<std::string> edited = lines_;
  edited[1].replace(edited[1].find("\"text\":\"") + 8, 1, "X");
  Result<CheckedJournal> bad = CheckJournalGrowth(*head, Join(edited));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("line 2"), std::string::npos) << bad.status().ToString();
}

}  // namespace
}  // namespace capsule::journal
