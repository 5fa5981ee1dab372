// The event's canonical form and id, and each type's data check.
#include "journal/event.h"

#include <gtest/gtest.h>

#include "capsule/base/sha256.h"

namespace capsule::journal {
namespace {

Event Sample() {
  Event event;
  event.clock = 42;
  event.data = {{"text", "hello"}, {"conversation", "main"}};
  event.machine = "m-0000000000000001";
  event.seq = 7;
  event.prev = std::string(64, 'a');
  event.ts = "2026-12-02T16:40:00Z";
  event.type = "user_message";
  event.id = *event.ComputeId();
  return event;
}

TEST(EventTest, CanonicalLineHasSortedKeysAndIdOfTheRest) {
  Event event = Sample();
  std::string without_id =
      "{\"clock\":42,\"data\":{\"conversation\":\"main\",\"text\":\"hello\"},\"machine\":\"m-0000000000000001\","
      "\"prev\":\"" + std::string(64, 'a') + "\",\"seq\":7,\"ts\":\"2026-12-02T16:40:00Z\",\"type\":\"user_message\"}";
  EXPECT_EQ(event.id, Sha256Hex(without_id));
  std::string line = *event.CanonicalLine();
  EXPECT_EQ(line, "{\"clock\":42,\"data\":{\"conversation\":\"main\",\"text\":\"hello\"},\"id\":\"" + event.id +
                      "\",\"machine\":\"m-0000000000000001\",\"prev\":\"" + std::string(64, 'a') +
                      "\",\"seq\":7,\"ts\":\"2026-12-02T16:40:00Z\",\"type\":\"user_message\"}");
  Result<Event> parsed = ParseEventLine(line, "line 1");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message();
  EXPECT_EQ(parsed->id, event.id);
  EXPECT_EQ(parsed->data, event.data);
  EXPECT_EQ(parsed->prev, event.prev);
  EXPECT_EQ(parsed->Conversation(), "main");
}

TEST(EventTest, FirstEventHasNullPrev) {
  Event event = Sample();
  event.seq = 1;
  event.prev.reset();
  event.id = *event.ComputeId();
  std::string line = *event.CanonicalLine();
  EXPECT_NE(line.find("\"prev\":null"), std::string::npos);
  EXPECT_TRUE(ParseEventLine(line, "line 1").ok());
}

TEST(EventTest, ParseRefusesNonCanonicalBadIdAndBadFields) {
  Event event = Sample();
  std::string line = *event.CanonicalLine();
  std::string spaced = line;
  spaced.insert(1, " ");
  EXPECT_EQ(ParseEventLine(spaced, "line 1").status().code(), Code::kCorruption);

  std::string edited = line;
  edited.replace(edited.find("hello"), 5, "HELLO");
  Result<Event> bad_id = ParseEventLine(edited, "line 1");
  EXPECT_EQ(bad_id.status().code(), Code::kCorruption);
  EXPECT_NE(bad_id.status().message().find("id does not match"), std::string::npos) << bad_id.status().message();

  EXPECT_EQ(ParseEventLine("not json", "line 1").status().code(), Code::kCorruption);
  EXPECT_EQ(ParseEventLine("{\"type\":\"x\"}", "line 1").status().code(), Code::kCorruption);
  Event bad_seq = Sample();
  bad_seq.prev.reset();  // seq 7 with prev null
  bad_seq.id = *bad_seq.ComputeId();
  EXPECT_EQ(ParseEventLine(*bad_seq.CanonicalLine(), "line 1").status().code(), Code::kCorruption);
}

TEST(EventTest, OrderIsClockMachineSeq) {
  Event a = Sample(), b = Sample();
  b.clock = 43;
  EXPECT_TRUE(EventOrderLess(a, b));
  b.clock = 42;
  b.machine = "m-0000000000000002";
  EXPECT_TRUE(EventOrderLess(a, b));
  b.machine = a.machine;
  b.seq = 8;
  EXPECT_TRUE(EventOrderLess(a, b));
  EXPECT_FALSE(EventOrderLess(b, a));
}

// A valid data object for each type.
Json GoodData(const std::string& type) {
  std::string id(64, 'b');
  if (type == "system" || type == "user_message") return {{"text", "t"}};
  if (type == "assistant_message") return {{"text", "t"}, {"provider", "openai"}, {"model", "m"}};
  if (type == "reasoning") return {{"text", "t"}, {"provider", "anthropic"}, {"model", "m"}, {"signature", "s"}};
  if (type == "tool_call") return {{"call_id", "c1"}, {"name", "ls"}, {"arguments", Json::object()}};
  if (type == "tool_result") return {{"call_id", "c1"}, {"content", "ok"}, {"is_error", false}};
  if (type == "tool_defined") return {{"name", "ls"}, {"description", "d"}, {"parameters", {{"type", "object"}}}};
  if (type == "model_switch") return {{"provider", "gemini"}, {"model", "m"}};
  if (type == "fact_remembered")
    return {{"subject", "user"}, {"key", "k"}, {"value", 3}, {"confidence", 0.5}, {"source", id}};
  if (type == "fact_expired") return {{"subject", "user"}, {"key", "k"}, {"source", id}};
  if (type == "run_opened") return {{"run_id", "r"}, {"framework", "f"}, {"thread_key", "t"}};
  if (type == "run_awaiting") return {{"run_id", "r"}, {"awaiting", "user"}};
  if (type == "run_closed") return {{"run_id", "r"}, {"status", "done"}};
  if (type == "secrets_used") return {{"secrets", {"OPENAI_API_KEY"}}, {"sandbox", "host"}};
  if (type == "edits_accepted") {
    return {{"edits", {{{"path", "notes/a.md"}, {"before", {{"sha256", id}, {"size", 3}}}, {"after", nullptr}}}}};
  }
  return nullptr;
}

TEST(EventDataTest, EveryTypeAcceptsGoodDataAndNamesEachMissingField) {
  ASSERT_EQ(KnownEventTypes().size(), 15u);
  for (const std::string& type : KnownEventTypes()) {
    Json good = GoodData(type);
    ASSERT_FALSE(good.is_null()) << type;
    EXPECT_TRUE(CheckEventData(type, good).ok()) << type << ": " << CheckEventData(type, good).message();
    for (const auto& [field, value] : good.items()) {
      if (field == "signature") continue;  // optional
      Json missing = good;
      missing.erase(field);
      Status status = CheckEventData(type, missing);
      EXPECT_EQ(status.code(), Code::kInvalidArgument) << type << "." << field;
      EXPECT_EQ(status.message(), type + ": data." + field + ": missing");
    }
    Json wrong_conversation = good;
    wrong_conversation["conversation"] = 5;
    EXPECT_EQ(CheckEventData(type, wrong_conversation).message(), type + ": data.conversation: must be a non-empty string");
    wrong_conversation["conversation"] = "side";
    EXPECT_TRUE(CheckEventData(type, wrong_conversation).ok());
    EXPECT_EQ(CheckEventData(type, Json::array()).message(), type + ": data: must be a JSON object");
  }
}

TEST(EventDataTest, WrongKindsNameTheField) {
  Json call = GoodData("tool_call");
  call["arguments"] = "{}";
  EXPECT_EQ(CheckEventData("tool_call", call).message(), "tool_call: data.arguments: must be a JSON object");
  Json result = GoodData("tool_result");
  result["is_error"] = "no";
  EXPECT_EQ(CheckEventData("tool_result", result).message(), "tool_result: data.is_error: must be true or false");
  Json fact = GoodData("fact_remembered");
  fact["confidence"] = 2;
  EXPECT_EQ(CheckEventData("fact_remembered", fact).message(),
            "fact_remembered: data.confidence: must be a number from 0 to 1");
  fact = GoodData("fact_remembered");
  fact["source"] = "e1";
  EXPECT_EQ(CheckEventData("fact_remembered", fact).message(),
            "fact_remembered: data.source: must be an event id (64 hex digits)");
  Json text = {{"text", 3}};
  EXPECT_EQ(CheckEventData("user_message", text).message(), "user_message: data.text: must be a string");
  Status unknown = CheckEventData("chat", {{"text", "t"}});
  EXPECT_EQ(unknown.code(), Code::kInvalidArgument);
  EXPECT_EQ(unknown.message().rfind("type chat: unknown event type", 0), 0u) << unknown.message();
}

TEST(EventTest, Rfc3339) {
  EXPECT_TRUE(IsRfc3339Utc("2026-12-02T16:40:00Z"));
  EXPECT_TRUE(IsRfc3339Utc("2026-12-02T16:40:00.123Z"));
  EXPECT_FALSE(IsRfc3339Utc("2026-12-02 16:40:00Z"));
  EXPECT_FALSE(IsRfc3339Utc("2026-12-02T16:40:00+01:00"));
  EXPECT_TRUE(IsRfc3339Utc(UtcNowRfc3339()));
}

}  // namespace
}  // namespace capsule::journal
