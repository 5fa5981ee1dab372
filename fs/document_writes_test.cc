// JsonPrefix, the mount's check that a journal line written in pieces can still become a
// JSON object: every prefix of a JSON document is accepted, a text is refused from the byte
// that no continuation could mend, and reading a text in pieces decides as reading it whole.
#include "fs/document_writes.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace capsule::fs {
namespace {

bool Accepts(std::string_view text, bool object = false) {
  JsonPrefix prefix(object);
  return prefix.Add(text);
}

// Where reading `text` whole is first refused: its length when never.
size_t RefusedAt(std::string_view text, bool object = false) {
  JsonPrefix prefix(object);
  for (size_t i = 0; i < text.size(); ++i) {
    if (!prefix.Add(text.substr(i, 1))) return i;
  }
  return text.size();
}

const std::vector<std::string>& Documents() {
  static const std::vector<std::string> documents = {
      R"({"type":"user_message","data":{"text":"hi"}})",
      R"({ "a" : [1, -2.5e+3, 0, 0.1E-2, true, false, null, {}, [], ""] , "b":{"c":{"d":[[]]}} })",
      "{\"s\":\"\\\" \\\\ \\/ \\b \\f \\n \\r \\t \\u00e9 \\ud83d\\ude00\"}",
      "{\"utf8\":\"\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80 \xED\x9F\xBF \xF4\x8F\xBF\xBF\"}",
      "\t\r\n {\"x\":1}\t \r",
      "[1,2,3]",
      "\"just a string\"",
      "-0.5",
      "123",
  };
  return documents;
}

TEST(JsonPrefixTest, EveryPrefixOfADocumentIsAccepted) {
  for (const std::string& document : Documents()) {
    for (size_t length = 0; length <= document.size(); ++length) {
      EXPECT_TRUE(Accepts(document.substr(0, length))) << document.substr(0, length);
    }
    // And when read in pieces of every size.
    for (size_t piece = 1; piece <= 7; ++piece) {
      JsonPrefix prefix;
      for (size_t at = 0; at < document.size(); at += piece) EXPECT_TRUE(prefix.Add(document.substr(at, piece)));
    }
  }
}

TEST(JsonPrefixTest, ATextIsRefusedAtTheByteNoContinuationCouldMend) {
  struct Case {
    std::string text;
    size_t refused_at;
  };
  const std::vector<Case> cases = {
      {"not json", 1},
      {"{\"a\":1}x", 7},
      {"{\"a\":1,}", 7},
      {"{\"a\" 1}", 5},
      {"{a:1}", 1},
      {"[1,]", 3},
      {"[01]", 2},
      {"[-]", 2},
      {"[1.]", 3},
      {"[1.e5]", 3},
      {"[1e]", 3},
      {"[tru]", 4},
      {"[nul1]", 4},
      {"{\"a\":[1}", 7},
      {"[1]]", 3},
      {"{\"s\":\"a\x01\"}", 7},
      {"{\"s\":\"\\x\"}", 7},
      {"{\"s\":\"\\u12g4\"}", 10},
      {"{\"s\":\"\\udc00\"}", 11},          // a low surrogate alone
      {"{\"s\":\"\\ud83dx\"}", 12},         // a high surrogate without its low one
      {"{\"s\":\"\\ud83d\\u0041\"}", 17},   // ... or with another escape after it
      {"{\"s\":\"\xC0\xAF\"}", 6},          // an overlong form
      {"{\"s\":\"\xE0\x80\x80\"}", 7},
      {"{\"s\":\"\xED\xA0\x80\"}", 7},      // a surrogate in UTF-8
      {"{\"s\":\"\xF4\x90\x80\x80\"}", 7},  // past U+10FFFF
      {"{\"s\":\"\xC3x\"}", 7},
      {"{\"s\":\"\xFF\"}", 6},
      {"{} {}", 3},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(RefusedAt(c.text), c.refused_at) << c.text;
    // Whole, and in two pieces at every cut, the same verdict; refused, it stays refused.
    EXPECT_FALSE(Accepts(c.text)) << c.text;
    for (size_t cut = 0; cut <= c.text.size(); ++cut) {
      JsonPrefix prefix;
      bool first = prefix.Add(c.text.substr(0, cut));
      bool second = prefix.Add(c.text.substr(cut));
      EXPECT_EQ(first, cut <= c.refused_at) << c.text << " cut at " << cut;
      EXPECT_FALSE(second) << c.text << " cut at " << cut;
      EXPECT_FALSE(prefix.Add("")) << c.text;
    }
  }
}

TEST(JsonPrefixTest, AJournalLineMustBeAnObjectNestedNoDeeperThanTheLimit) {
  EXPECT_TRUE(Accepts(" \t{\"type\":", /*object=*/true));
  EXPECT_FALSE(Accepts("[1]", /*object=*/true));
  EXPECT_FALSE(Accepts("\"s\"", /*object=*/true));
  EXPECT_FALSE(Accepts("1", /*object=*/true));
  const std::string deepest = "{\"a\":" + std::string(kMaxJsonDepth - 1, '[');
  EXPECT_TRUE(Accepts(deepest, /*object=*/true));
  EXPECT_EQ(RefusedAt(deepest + "["), deepest.size());
}

// A copy taken before a piece is what undoes it: the journal's refused write leaves the
// unfinished line's state as it was.
TEST(JsonPrefixTest, ACopyUndoesAPiece) {
  JsonPrefix prefix(/*object=*/true);
  ASSERT_TRUE(prefix.Add("{\"type\":\"user_message\",\"data\":{\"text\":\"a"));
  JsonPrefix before = prefix;
  EXPECT_FALSE(prefix.Add("\"}x"));
  prefix = before;
  EXPECT_TRUE(prefix.Add("b\"}}"));
  EXPECT_FALSE(prefix.Add(","));
}

}  // namespace
}  // namespace capsule::fs
