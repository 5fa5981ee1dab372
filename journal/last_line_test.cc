// The journal's last line found in bounded reads whatever its length (at every block
// boundary), and the largest event a journal takes (kMaxEventLineBytes): refused by an append
// and by a merge one byte over it, taken at it, and read back at any size an older journal
// already holds.
#include <fcntl.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/journal.h"
#include "journal/journal_file.h"
#include "journal/test_util.h"

namespace capsule::journal {
namespace {

using testing::CopyCapsuleAs;
using testing::FixedTimeOptions;
using testing::MachineName;
using testing::MakeTempDir;
using testing::MakeTestCapsule;

// ReadLastLine over `text`, counting the bytes it reads.
struct CountedRead {
  std::string text;
  uint64_t bytes_read = 0;
  Result<std::string> LastLine(size_t block) {
    ReadAtFunction read = [this](uint64_t offset, char* buffer, size_t size) -> Result<size_t> {
      if (offset >= text.size()) return size_t{0};
      size_t n = std::min<size_t>(size, text.size() - offset);
      std::memcpy(buffer, text.data() + offset, n);
      bytes_read += n;
      return n;
    };
    return ReadLastLine(read, text.size(), "journal", block);
  }
};

TEST(LastLineTest, EveryLengthAroundTheBlockIsReadWholeAndInBoundedReads) {
  constexpr size_t kBlock = 256;
  for (size_t length : {size_t{0}, size_t{1}, kBlock - 2, kBlock - 1, kBlock, kBlock + 1, 3 * kBlock,
                        37 * kBlock + 5, size_t{1} << 20}) {
    std::string line(length, 'x');
    if (length > 0) line[0] = 'a', line[length - 1] = 'z';
    for (const std::string& before : {std::string(), std::string("{\"first\":1}\n"), std::string(5 * kBlock, 'b') + "\n"}) {
      CountedRead counted{before + line + "\n"};
      Result<std::string> last = counted.LastLine(kBlock);
      ASSERT_TRUE(last.ok()) << last.status().message();
      EXPECT_EQ(*last, line) << "length " << length << " after " << before.size() << " bytes";
      // The line read once, the blocks searched for its start, the final byte: never again
      // and again (a line of a million bytes read a block at a time once cost minutes).
      EXPECT_LE(counted.bytes_read, 3 * length + kBlock + 2) << "length " << length;
    }
  }
}

TEST(LastLineTest, EmptyJournalAndOneWithoutItsFinalNewline) {
  CountedRead empty{""};
  EXPECT_EQ(*empty.LastLine(16), "");
  EXPECT_EQ(empty.bytes_read, 0u);
  CountedRead torn{"{\"a\":1}\n{\"b\":2}"};
  EXPECT_EQ(*torn.LastLine(4), "{\"b\":2}");
  CountedRead only{"{\"only\":1}"};
  EXPECT_EQ(*only.LastLine(3), "{\"only\":1}");
  CountedRead blank{"{\"a\":1}\n\n"};
  EXPECT_EQ(*blank.LastLine(4), "");
}

TEST(LastLineTest, AFileCutShortWhileReadIsAnErrorNamingIt) {
  ReadAtFunction short_read = [](uint64_t, char*, size_t) -> Result<size_t> { return size_t{0}; };
  Result<std::string> last = ReadLastLine(short_read, 100, "memory/timeline_events.jsonl", 16);
  ASSERT_FALSE(last.ok());
  EXPECT_NE(last.status().message().find("memory/timeline_events.jsonl: ended before its size"), std::string::npos)
      << last.status().message();
}

Json Text(size_t length) { return {{"text", std::string(length, 'x')}}; }

class EventSizeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("event_size") + "/capsule";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
  }
  // The length of the text that makes the first event of `machine` exactly `line_bytes` long.
  static size_t TextFor(uint64_t line_bytes, const std::string& machine) {
    Event probe;
    probe.clock = 1;
    probe.data = Text(0);
    probe.machine = machine;
    probe.seq = 1;
    probe.ts = "2026-12-02T16:40:00Z";
    probe.type = "user_message";
    probe.id = std::string(64, '0');
    return static_cast<size_t>(line_bytes - probe.CanonicalLine()->size());
  }
  std::string JournalText() { return *ReadFile(JoinPath(dir_, kJournalPath)); }
  std::string dir_;
};

void ExpectOverTheLimit(const Status& status, uint64_t line_bytes) {
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), Code::kInvalidArgument);
  const std::string& message = status.message();
  for (const std::string& words :
       {"an event of " + std::to_string(line_bytes) + " bytes (its canonical line) is over the journal's limit of " +
            std::to_string(kMaxEventLineBytes) + " bytes (16 MiB)",
        std::string("store large content as an attachment (capsule attach)")}) {
    EXPECT_NE(message.find(words), std::string::npos) << message;
  }
}

TEST_F(EventSizeTest, AnAppendOneByteOverTheLimitIsRefusedAndOneAtItIsTaken) {
  Result<Journal> journal = Journal::OpenForWrite(dir_, FixedTimeOptions(false));
  ASSERT_TRUE(journal.ok());
  size_t at_limit = TextFor(kMaxEventLineBytes, MachineName(1));
  Result<Event> over = journal->Append("user_message", Text(at_limit + 1));
  ExpectOverTheLimit(over.status(), kMaxEventLineBytes + 1);
  EXPECT_EQ(JournalText(), "") << "nothing written";
  // In a batch, the refusal names the event by its position and writes none.
  Result<std::vector<Event>> batch =
      journal->AppendAll({{"user_message", Text(1)}, {"user_message", Text(kMaxEventLineBytes)}});
  ASSERT_FALSE(batch.ok());
  EXPECT_EQ(batch.status().message().rfind("event 2 of 2: user_message: an event of ", 0), 0u)
      << batch.status().message();
  EXPECT_EQ(JournalText(), "");
  Result<Event> exact = journal->Append("user_message", Text(at_limit));
  ASSERT_TRUE(exact.ok()) << exact.status().message();
  EXPECT_EQ(exact->CanonicalLine()->size(), kMaxEventLineBytes);
  ASSERT_TRUE(Journal::Verify(dir_).ok());
}

// A line over the limit that an older journal holds is read, checked and appended after; a
// merge refuses to add one.
TEST_F(EventSizeTest, AJournalAlreadyHoldingAnOversizeLineStaysUsable) {
  std::string other = DirName(dir_) + "/other";
  ASSERT_TRUE(CopyCapsuleAs(dir_, other, MachineName(2)).ok());
  Event big;
  big.clock = 1;
  big.data = Text(TextFor(kMaxEventLineBytes + 1000, MachineName(1)));
  big.machine = MachineName(1);
  big.seq = 1;
  big.ts = "2026-12-02T16:40:00Z";
  big.type = "user_message";
  big.id = *big.ComputeId();
  std::string line = *big.CanonicalLine();
  ASSERT_EQ(line.size(), kMaxEventLineBytes + 1000);
  {
    UniqueFd fd = *OpenFile(JoinPath(dir_, kJournalPath), O_WRONLY | O_APPEND | O_CLOEXEC);
    ASSERT_TRUE(WriteAll(fd.get(), line + "\n", "journal").ok());
  }
  Result<Journal> journal = Journal::OpenForWrite(dir_, FixedTimeOptions(false));
  ASSERT_TRUE(journal.ok());
  Result<Event> after = journal->Append("user_message", Text(3));
  ASSERT_TRUE(after.ok()) << after.status().message();
  EXPECT_EQ(after->seq, 2u);
  EXPECT_EQ(after->prev, big.id);
  EXPECT_EQ(after->clock, 2u);
  ASSERT_TRUE(Journal::Verify(dir_).ok());

  // The other copy lacks it: a merge of it in, from the file or from the events, refuses.
  Result<Journal> there = Journal::OpenForWrite(other, FixedTimeOptions(false));
  ASSERT_TRUE(there.ok());
  std::string before = *ReadFile(JoinPath(other, kJournalPath));
  Result<MergeResult> from_file = there->MergeFrom(*OtherJournal::Load(dir_));
  ExpectOverTheLimit(from_file.status(), kMaxEventLineBytes + 1000);
  EXPECT_EQ(from_file.status().message().rfind("merge: event " + big.id, 0), 0u) << from_file.status().message();
  Result<MergeResult> from_events = there->MergeFrom(*Journal::Read(dir_));
  ExpectOverTheLimit(from_events.status(), kMaxEventLineBytes + 1000);
  EXPECT_EQ(*ReadFile(JoinPath(other, kJournalPath)), before) << "nothing merged";
}

}  // namespace
}  // namespace capsule::journal
