// The fast line reader against ParseEventLine, on random events and on lines mutated from
// them (keys reordered, whitespace, escapes, unicode, big and fractional numbers, bytes
// changed, truncations), most with their id recomputed so that only the form decides:
// whatever ReadEventLine accepts, ParseEventLine accepts with the same fields and id, and it
// refuses a line ParseEventLine accepts only when machine or type is written with escapes.
#include "journal/event_line.h"

#include <random>

#include <gtest/gtest.h>

#include "capsule/base/sha256.h"

namespace capsule::journal {
namespace {

class Random {
 public:
  explicit Random(uint32_t seed) : rng_(seed) {}
  size_t Below(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }
  bool OneIn(size_t n) { return Below(n) == 0; }

  std::string Text() {
    static const std::vector<std::string> pieces = {
        "a", "b", "Z", " ", "0", "\"", "\\", "/", "\n", "\t", "\b", "\f", "\r", std::string(1, '\0'),
        "\x01", "\x1f", "\x7f", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xef\xbf\xbf", "\xe0\xa0\x80",
        "hello", "id", "\"id\":\"", ",", "{", "}", "[", "]", ":", "u00", "\xed\x9f\xbf", "\xf4\x8f\xbf\xbf"};
    std::string out;
    size_t n = Below(6);
    for (size_t i = 0; i < n; ++i) out += pieces[Below(pieces.size())];
    return out;
  }

  Json Number() {
    switch (Below(8)) {
      case 0: return Json(static_cast<uint64_t>(rng_()) << Below(40));
      case 1: return Json(-static_cast<int64_t>(Below(1000000)) - 1);
      case 2: return Json(std::numeric_limits<uint64_t>::max());
      case 3: return Json(std::numeric_limits<int64_t>::min());
      case 4: return Json(static_cast<double>(Below(100000)) / 7.0);
      case 5: return Json(std::ldexp(1.0 + static_cast<double>(Below(1000)) / 1000.0, static_cast<int>(Below(200)) - 100));
      case 6: return Json(1e300 * static_cast<double>(Below(10) + 1));
      default: return Json(0.5);
    }
  }

  Json Value(int depth) {
    switch (depth > 4 ? Below(4) : Below(7)) {
      case 0: return Json(Text());
      case 1: return Number();
      case 2: return OneIn(3) ? Json(nullptr) : Json(OneIn(2));
      case 3: return Json(Text() + "x");
      case 4: {
        Json array = Json::array();
        for (size_t i = Below(4); i > 0; --i) array.push_back(Value(depth + 1));
        return array;
      }
      default: return Object(depth + 1);
    }
  }

  Json Object(int depth) {
    Json object = Json::object();
    for (size_t i = Below(5); i > 0; --i) object[Text()] = Value(depth + 1);
    return object;
  }

  Event RandomEvent() {
    Event event;
    event.clock = OneIn(10) ? std::numeric_limits<uint64_t>::max() : 1 + Below(1000000);
    event.data = Object(1);
    event.machine = OneIn(20) ? "m-" + Text() + "x" : "m-000000000000000" + std::to_string(Below(10));
    event.seq = 1 + (OneIn(2) ? 0 : Below(1000));
    if (event.seq > 1) event.prev = Sha256Hex(std::to_string(Below(1000)));
    event.ts = OneIn(5) ? "2026-12-02T16:40:00.25Z" : "2026-12-02T16:40:00Z";
    event.type = OneIn(20) ? Text() + "t" : "user_message";
    event.id = *event.ComputeId();
    return event;
  }

  std::mt19937 rng_;
};

// The line with its id set to what its content (the line without its id member) digests,
// found as ParseEventLine finds it; unchanged when it has no id member.
std::string WithFreshId(std::string line) {
  size_t at = line.rfind(",\"id\":\"");
  if (at == std::string::npos || line.size() < at + 7 + 65 || line[at + 7 + 64] != '"') return line;
  Sha256 hasher;
  hasher.Update(std::string_view(line).substr(0, at));
  hasher.Update(std::string_view(line).substr(at + 7 + 65));
  line.replace(at + 7, 64, hasher.FinishHex());
  return line;
}

// Top-level members of `event` in another order (not canonical, same values).
std::string Reordered(const Event& event, Random& random) {
  nlohmann::ordered_json out;
  std::vector<std::string> keys = {"clock", "data", "id", "machine", "prev", "seq", "ts", "type"};
  Json whole = event.ToJson(true);
  std::shuffle(keys.begin(), keys.end(), random.rng_);
  for (const std::string& key : keys) out[key] = whole[key];
  return out.dump();
}

std::string Mutated(const std::string& line, Random& random) {
  static const std::vector<std::string> inserts = {
      " ", "\\", "\"", "u", "0", "1", "9", "e", "E", ".", "-", "+", ",", ":", "{", "}", "[", "]",
      "\x80", "\xff", "\xc0\x80", "\xed\xa0\x80", "\\u0041", "\\u001F", "\\u000a", "\\/", "\\ud83d\\ude00",
      "null", "true", "1.0", "1e2", "-0", "18446744073709551616", "-9223372036854775809", "1e999", "\xef\xbb\xbf"};
  std::string out = line;
  size_t edits = 1 + random.Below(2);
  for (size_t e = 0; e < edits && !out.empty(); ++e) {
    size_t at = random.Below(out.size());
    switch (random.Below(6)) {
      case 0: out.insert(at, inserts[random.Below(inserts.size())]); break;
      case 1: out.erase(at, 1 + random.Below(3)); break;
      case 2: out[at] = inserts[random.Below(inserts.size())][0]; break;
      case 3: out.resize(at); break;
      case 4: {  // swap two neighbouring pieces
        size_t length = 1 + random.Below(8);
        if (at + 2 * length <= out.size()) {
          std::string a = out.substr(at, length), b = out.substr(at + length, length);
          out.replace(at, 2 * length, b + a);
        }
        break;
      }
      default: out.insert(at, out.substr(random.Below(out.size()), 1 + random.Below(6))); break;
    }
  }
  return out;
}

// A plain event, to which the edge cases add one member of data.
std::string PlainLine() {
  Event event;
  event.clock = 3;
  event.data = {{"text", "x"}};
  event.machine = "m-0000000000000001";
  event.seq = 1;
  event.ts = "2026-12-02T16:40:00Z";
  event.type = "user_message";
  event.id = *event.ComputeId();
  return *event.CanonicalLine();
}

struct Tally {
  size_t accepted = 0, refused = 0, fallbacks = 0;
};

void Compare(const std::string& line, Tally* tally) {
  EventLine fast;
  bool fast_ok = ReadEventLine(line, &fast);
  Result<Event> slow = ParseEventLine(line, "line");
  if (fast_ok) {
    ASSERT_TRUE(slow.ok()) << "fast accepted what the slow path refuses (" << slow.status().message() << "): " << line;
    EXPECT_EQ(fast.id, slow->id) << line;
    EXPECT_EQ(fast.clock, slow->clock) << line;
    EXPECT_EQ(fast.seq, slow->seq) << line;
    EXPECT_EQ(fast.machine, slow->machine) << line;
    EXPECT_EQ(std::string(fast.prev), slow->prev.value_or("")) << line;
    EXPECT_EQ(fast.ts, slow->ts) << line;
    EXPECT_EQ(fast.type, slow->type) << line;
    Result<Event> built = ToEvent(fast, "line");
    ASSERT_TRUE(built.ok());
    EXPECT_EQ(built->data, slow->data) << line;
    EXPECT_EQ(*built->CanonicalLine(), line);
    ++tally->accepted;
  } else if (slow.ok()) {
    // Only a machine or type written with escapes is left to the slow path.
    bool escaped = CanonicalJson(Json(slow->machine))->size() != slow->machine.size() + 2 ||
                   CanonicalJson(Json(slow->type))->size() != slow->type.size() + 2;
    EXPECT_TRUE(escaped) << "the fast reader refused a line the slow path accepts: " << line;
    ++tally->fallbacks;
  } else {
    ++tally->refused;
  }
}

TEST(EventLineTest, AgreesWithParseEventLineOnRandomAndMutatedLines) {
  Random random(20261202);
  Tally tally;
  for (int round = 0; round < 4000; ++round) {
    Event event = random.RandomEvent();
    Result<std::string> line = event.CanonicalLine();
    ASSERT_TRUE(line.ok()) << line.status().message();
    ASSERT_NO_FATAL_FAILURE(Compare(*line, &tally));
    ASSERT_NO_FATAL_FAILURE(Compare(WithFreshId(Reordered(event, random)), &tally));
    for (int m = 0; m < 12; ++m) {
      std::string mutated = Mutated(*line, random);
      ASSERT_NO_FATAL_FAILURE(Compare(mutated, &tally));
      ASSERT_NO_FATAL_FAILURE(Compare(WithFreshId(mutated), &tally));
    }
  }
  // The comparison means something only when both verdicts happen often.
  EXPECT_GT(tally.accepted, 5000u);
  EXPECT_GT(tally.refused, 20000u);
  std::printf("accepted %zu, refused %zu, left to the slow path %zu\n", tally.accepted, tally.refused,
              tally.fallbacks);
}

TEST(EventLineTest, NumbersAtTheEdges) {
  std::string line = PlainLine();
  Tally tally;
  for (const char* number :
       {"0", "-0", "1", "-1", "18446744073709551615", "18446744073709551616", "-9223372036854775808",
        "-9223372036854775809", "0.5", "0.50", "5e-1", "1e-07", "1e-7", "1.0", "1e2", "100", "1E2", "1e+300", "1e300",
        "1e999", "-1e999", "9007199254740992", "9007199254740993", "9.007199254740994e+15", "9007199254740994.0",
        "1.7976931348623157e+308", "5e-324", "4.9406564584124654e-324", "1e-400", "-0.0", "0.1", "00", "01", "-",
        "1.", ".5", "1e", "2.5E+3", "123456789012345678901234567890"}) {
    std::string with = line;
    with.replace(with.find("\"data\":{") + 8, 0, "\"\":" + std::string(number) + ",");
    ASSERT_NO_FATAL_FAILURE(Compare(WithFreshId(with), &tally)) << number;
  }
  EXPECT_GT(tally.accepted, 8u);
}

TEST(EventLineTest, DepthLimitIsParseJsonsLimit) {
  std::string line = PlainLine();
  Tally tally;
  for (size_t depth : {250u, 253u, 254u, 255u, 256u, 300u}) {
    std::string with = line;
    with.replace(with.find("\"data\":{") + 8, 0,
                 "\"\":" + std::string(depth, '[') + std::string(depth, ']') + ",");
    ASSERT_NO_FATAL_FAILURE(Compare(WithFreshId(with), &tally)) << depth;
  }
  EXPECT_GT(tally.accepted, 0u);
  EXPECT_GT(tally.refused, 0u);
}

}  // namespace
}  // namespace capsule::journal
