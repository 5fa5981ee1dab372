// The one-pass merge against the merge it replaced (both sides read into events, EventsToAdd,
// then the ordered union), on random histories of copies that append, merge each other, and
// sometimes share a machine id (a forged or duplicated copy, whose chains conflict), and on
// sides with a line damaged, dropped or repeated: the same bytes, or the same refusal.
#include <random>

#include <gtest/gtest.h>

#include "journal/check.h"
#include "journal/merge_pipe.h"
#include "journal/merge_stream.h"
#include "journal/merge_text.h"

namespace capsule::journal {
namespace {

// The merge as it was before the one-pass merge: each side read whole into events.
Result<std::string> ReferenceMerge(std::string_view held, std::string_view arriving) {
  Result<std::vector<Event>> ours = ReadJournalText(held);
  if (!ours.ok()) return ours.status().WithContext("merge: the journal held here");
  Result<std::vector<Event>> theirs = ReadJournalText(arriving);
  if (!theirs.ok()) return theirs.status().WithContext("merge: the arriving journal");
  CAPSULE_ASSIGN_OR_RETURN(std::vector<const Event*> added, EventsToAdd(*ours, *theirs));
  std::string out;
  size_t i = 0, j = 0;
  while (i < ours->size() || j < added.size()) {
    bool take_ours = j == added.size() || (i < ours->size() && EventOrderLess((*ours)[i], *added[j]));
    out += *(take_ours ? (*ours)[i++] : *added[j++]).CanonicalLine() + "\n";
  }
  return out;
}

struct Copy {
  std::string machine;
  std::string text;
};

Event Next(const Copy& copy, std::mt19937& rng) {
  Result<std::vector<Event>> events = ReadJournalText(copy.text);
  uint64_t max_clock = 0, seq = 0;
  std::optional<std::string> prev;
  for (const Event& event : *events) {
    max_clock = std::max(max_clock, event.clock);
    if (event.machine == copy.machine && event.seq > seq) {
      seq = event.seq;
      prev = event.id;
    }
  }
  Event event;
  event.clock = max_clock + 1 + rng() % 2;
  event.data = {{"text", "note " + std::to_string(rng() % 1000)}};
  event.machine = copy.machine;
  event.seq = seq + 1;
  event.prev = prev;
  event.ts = "2026-12-02T16:40:00Z";
  event.type = "user_message";
  event.id = *event.ComputeId();
  return event;
}

std::string Damaged(const std::string& text, std::mt19937& rng) {
  std::vector<std::string> lines;
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  if (lines.empty()) return text;
  size_t at = rng() % lines.size();
  switch (rng() % 4) {
    case 0: lines[at].insert(rng() % lines[at].size(), " "); break;
    case 1: lines.erase(lines.begin() + static_cast<long>(at)); break;
    case 2: lines.insert(lines.begin() + static_cast<long>(at), lines[rng() % lines.size()]); break;
    default: std::swap(lines[at], lines[rng() % lines.size()]); break;
  }
  std::string out;
  for (const std::string& line : lines) out += line + "\n";
  return out;
}

// The merge of the two texts streamed through small blocks, the output keeping the views it is
// given until told to settle (as the journal's writer does): the merged text, or the refusal;
// `side_failed` when a side's own check stopped it.
Result<std::string> StreamedMerge(std::string_view held, std::string_view arriving, size_t block, bool shared,
                                  bool* side_failed) {
  // Shared: the lines both begin with are read and checked by ours alone; theirs starts after them.
  auto common = std::make_shared<CommonLines>();
  using Role = StreamedSide::Role;
  StreamedSide ours(TextReadAt(held), block, 2, shared ? Role::kOurs : Role::kAlone, common, TextReadAt(arriving));
  StreamedSide theirs(TextReadAt(arriving), block + 13, 3, shared ? Role::kTheirs : Role::kAlone, common);
  *side_failed = false;
  std::string out, passed;
  std::vector<std::string_view> pending;
  auto settle = [&]() {
    for (std::string_view piece : pending) out.append(piece);
    pending.clear();
    return Status::Ok();
  };
  MergeOutput output{[&](std::string_view text) {
                       passed.append(text);
                       return Status::Ok();
                     },
                     [&](uint64_t bytes) {
                       // What the merge passed of ours, given in pieces before, is what it begins with.
                       EXPECT_EQ(passed, held.substr(0, bytes)) << "block " << block;
                       out.append(held.substr(0, bytes));
                       return Status::Ok();
                     },
                     [&](std::string_view piece) {
                       pending.push_back(piece);
                       return Status::Ok();
                     },
                     settle};
  Result<MergeCounts> counts = MergeSides(ours, theirs, output);
  *side_failed = ours.failed() || theirs.failed();
  if (!counts.ok()) return counts.status();
  (void)settle();
  if (counts->added == 0) return std::string(held.substr(0, CompleteLength(held)));
  return out;
}

TEST(MergeStreamTest, SameBytesOrSameRefusalAsTheMergeItReplaced) {
  std::mt19937 rng(4242);
  size_t merged = 0, refused = 0, damaged_in_common = 0, streamed_conflicts = 0;
  for (int round = 0; round < 150; ++round) {
    std::vector<Copy> copies;
    size_t count = 2 + rng() % 3;
    for (size_t c = 0; c < count; ++c) {
      // Now and then two copies share a machine id: their chains conflict once both append.
      std::string machine = "m-000000000000000" + std::to_string(rng() % 5 == 0 && c > 0 ? c - 1 : c);
      copies.push_back({machine, ""});
    }
    for (int step = 0; step < 30; ++step) {
      Copy& copy = copies[rng() % copies.size()];
      if (rng() % 4 == 0) {
        const Copy& other = copies[rng() % copies.size()];
        Result<std::string> joined = ReferenceMerge(copy.text, other.text);
        if (joined.ok()) copy.text = *joined;
      } else {
        copy.text += *Next(copy, rng).CanonicalLine() + "\n";
      }
    }
    for (size_t a = 0; a < copies.size(); ++a) {
      for (size_t b = 0; b < copies.size(); ++b) {
        std::string held = copies[a].text, arriving = copies[b].text;
        if (rng() % 5 == 0) (rng() % 2 ? held : arriving) = Damaged(rng() % 2 ? held : arriving, rng);
        if (rng() % 7 == 0) {
          // Damage to the history both hold, which is read and checked once for both.
          size_t common = CommonLinesLength(held, arriving);
          std::string damaged = Damaged(held.substr(0, common), rng);
          held = damaged + held.substr(common);
          arriving = damaged + arriving.substr(common);
          ++damaged_in_common;
        }
        if (rng() % 6 == 0) arriving += arriving.substr(0, arriving.size() / 3);  // a torn last line
        Result<std::string> expected = ReferenceMerge(held, arriving);
        Result<std::string> got = MergeJournalTexts(held, arriving);
        ASSERT_EQ(got.ok(), expected.ok()) << (got.ok() ? expected.status().message() : got.status().message());
        // Streamed through blocks of a few lines (or of less than one: a line longer than a block).
        bool side_failed = false;
        size_t block = 1 + rng() % 1200;
        bool shared = rng() % 3 != 0;
        Result<std::string> streamed = StreamedMerge(held, arriving, block, shared, &side_failed);
        ASSERT_EQ(streamed.ok(), expected.ok()) << "block " << block << (shared ? ", shared" : "");
        if (expected.ok()) {
          ASSERT_EQ(*got, *expected);
          ASSERT_EQ(*streamed, *expected) << "block " << block << (shared ? ", shared" : "");
          ++merged;
        } else {
          ASSERT_EQ(got.status().message(), expected.status().message());
          // A side's fault stops the stream (the whole texts' check names it); a conflict is named alike.
          if (!side_failed) {
            ASSERT_EQ(streamed.status().message(), expected.status().message())
                << "block " << block << (shared ? ", shared" : "");
            ++streamed_conflicts;
          }
          ++refused;
        }
      }
    }
  }
  EXPECT_GT(merged, 300u);
  EXPECT_GT(refused, 100u);
  EXPECT_GT(damaged_in_common, 100u);
  EXPECT_GT(streamed_conflicts, 20u);
  std::printf("merged %zu, refused %zu (conflicts named by the stream %zu), damaged in the common lines %zu\n", merged,
              refused, streamed_conflicts, damaged_in_common);
}

TEST(CommonLinesLengthTest, WholeLinesBothTextsBeginWith) {
  EXPECT_EQ(CommonLinesLength("", ""), 0u);
  EXPECT_EQ(CommonLinesLength("a\nb\n", "a\nb\n"), 4u);
  EXPECT_EQ(CommonLinesLength("a\nb\n", "a\nbc\n"), 2u);  // b's line goes on in the other
  EXPECT_EQ(CommonLinesLength("a\nb", "a\nb"), 2u);        // a line without its newline is not whole
  EXPECT_EQ(CommonLinesLength("ab\n", "ac\n"), 0u);
  std::string long_text;
  for (int i = 0; i < 20000; ++i) long_text += "line " + std::to_string(i) + "\n";
  std::string other = long_text;
  size_t at = long_text.find("line 15000\n");
  other[at + 7] = 'X';
  EXPECT_EQ(CommonLinesLength(long_text, other), at);
  EXPECT_EQ(CommonLinesLength(long_text, long_text.substr(0, at + 3)), at);
}

// A receiver's check before it appends: every chain held must be a prefix of the stream's, or
// the stream's of it; a machine whose chain differs is named with its conversation.
TEST(SharedPrefixTest, ChainsThatGrewApartPassAChainThatDiffersIsNamed) {
  std::mt19937 rng(7);
  Copy a{"m-0000000000000001", ""};
  a.text += *Next(a, rng).CanonicalLine() + "\n";
  a.text += *Next(a, rng).CanonicalLine() + "\n";
  Copy held = a, arriving = a;
  arriving.text += *Next(arriving, rng).CanonicalLine() + "\n";  // the stream is ahead
  EXPECT_TRUE(CheckSharedPrefix(held.text, arriving.text).ok());
  EXPECT_TRUE(CheckSharedPrefix(arriving.text, held.text).ok());  // or behind
  Copy other{"m-0000000000000002", held.text};
  other.text += *Next(other, rng).CanonicalLine() + "\n";  // another machine's events here
  EXPECT_TRUE(CheckSharedPrefix(other.text, arriving.text).ok());

  Event mine = Next(held, rng);
  mine.data = {{"text", "said here"}, {"conversation", "trip"}};
  mine.id = *mine.ComputeId();
  held.text += *mine.CanonicalLine() + "\n";
  Status refused = CheckSharedPrefix(held.text, arriving.text);
  ASSERT_EQ(refused.code(), Code::kFailedPrecondition) << refused.ToString();
  EXPECT_NE(refused.message().find("conversation trip (main in the stream)"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find("machine m-0000000000000001, seq 3: event " + mine.id), std::string::npos)
      << refused.message();
}

}  // namespace
}  // namespace capsule::journal
