// Rendering the journal: the goldens (hand-written journals rendered for each provider,
// compared byte for byte with testdata/*.json), the switch A -> B -> A, the three rules, the
// window and its digest, the estimator, and how the target is chosen.
//
// To change a golden on purpose: bazel run //journal/render:update_goldens, then review
// `git diff journal/render/testdata`. This test never writes them.
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "journal/render/conversation.h"
#include "journal/render/render.h"
#include "journal/render/test_util.h"
#include "journal/render/trim.h"

namespace capsule::journal::render {
namespace {

using testing::EventsFromScript;

const char kTestdata[] = "journal/render/testdata/";

std::vector<Event> Script(const std::string& name) {
  Result<std::string> text = ReadFile(kTestdata + name + ".jsonl");
  EXPECT_TRUE(text.ok()) << text.status().message();
  Result<std::vector<Event>> events = EventsFromScript(text.ok() ? *text : "", name);
  EXPECT_TRUE(events.ok()) << events.status().message();
  return events.ok() ? *events : std::vector<Event>{};
}

RenderTarget For(Provider provider, const std::string& model, std::optional<uint64_t> budget = std::nullopt) {
  RenderTarget target;
  target.provider = provider;
  target.model = model;
  target.context_tokens = budget;
  return target;
}

Json Render(const std::vector<Event>& events, const RenderTarget& target) {
  Result<Json> body = RenderRequest(events, target);
  EXPECT_TRUE(body.ok()) << body.status().message();
  return body.ok() ? *body : Json();
}

bool Has(const Json& json, const std::string& text) { return json.dump().find(text) != std::string::npos; }

TEST(RenderGoldenTest, EveryCaseMatchesItsGoldenByteForByte) {
  for (const testing::GoldenCase& golden : testing::GoldenCases()) {
    SCOPED_TRACE(golden.name);
    Result<std::string> script = ReadFile(kTestdata + golden.script + ".jsonl");
    ASSERT_TRUE(script.ok()) << script.status().message();
    Result<std::string> expected = ReadFile(kTestdata + golden.name + ".json");
    ASSERT_TRUE(expected.ok()) << expected.status().message()
                               << " (make it with: bazel run //journal/render:update_goldens)";
    Result<std::string> actual = testing::RenderGolden(golden, *script);
    ASSERT_TRUE(actual.ok()) << actual.status().message();
    EXPECT_EQ(*actual, *expected) << "differs from testdata/" << golden.name
                                  << ".json; if the change is meant: bazel run //journal/render:update_goldens";
  }
}

TEST(RenderSwitchTest, SwitchingAToBAndBackRendersAIdentically) {
  std::vector<Event> before = Script("switch_a");
  std::vector<Event> on_b = Script("switch_ab");
  std::vector<Event> back = Script("switch_aba");
  Result<RenderTarget> a1 = ResolveTarget(before, {});
  Result<RenderTarget> b = ResolveTarget(on_b, {});
  Result<RenderTarget> a2 = ResolveTarget(back, {});
  ASSERT_TRUE(a1.ok() && b.ok() && a2.ok());
  EXPECT_EQ(a1->provider, Provider::kAnthropic);
  EXPECT_EQ(b->provider, Provider::kGemini);
  EXPECT_EQ(b->model, "gemini-2.5-pro");
  EXPECT_EQ(a2->provider, Provider::kAnthropic);
  EXPECT_EQ(a2->model, "claude-sonnet-4-5");

  Json first = Render(before, *a1);
  Json on_gemini = Render(on_b, *b);
  Json second = Render(back, *a2);
  EXPECT_EQ(*CanonicalJson(first), *CanonicalJson(second));
  EXPECT_TRUE(Has(first, "sig-a-1"));          // A's thinking goes back to A...
  EXPECT_FALSE(Has(on_gemini, "sig-a-1"));     // ...never to B...
  EXPECT_FALSE(Has(on_gemini, "Look at the calendar first."));
  EXPECT_TRUE(Has(second, "sig-a-1"));         // ...and to A again after the switch back.
  EXPECT_TRUE(Has(on_gemini, "functionCall"));  // B still sees the call and its result
  EXPECT_TRUE(Has(on_gemini, "10:00, 14:00"));
}

TEST(RenderReasoningTest, ReasoningGoesOnlyToTheProviderAndModelThatMadeIt) {
  std::vector<Event> events = Script("reasoning");
  Json opus = Render(events, For(Provider::kAnthropic, "claude-opus-4-1"));
  EXPECT_TRUE(Has(opus, "sig-opus-1"));
  EXPECT_TRUE(Has(opus, "redacted-opus-2"));
  for (const char* other : {"sig-sonnet-3", "Older model's thought.", "gsig-", "enc-openai", "Summary of thought."}) {
    EXPECT_FALSE(Has(opus, other)) << other;
  }
  Json sonnet = Render(events, For(Provider::kAnthropic, "claude-sonnet-4"));
  EXPECT_TRUE(Has(sonnet, "sig-sonnet-3"));
  EXPECT_FALSE(Has(sonnet, "sig-opus-1"));
  EXPECT_FALSE(Has(sonnet, "redacted-opus-2"));

  Json gemini = Render(events, For(Provider::kGemini, "gemini-3-pro-preview"));
  for (const char* other : {"sig-opus", "redacted-opus", "sig-sonnet", "enc-openai", "Summary of thought."}) {
    EXPECT_FALSE(Has(gemini, other)) << other;
  }
  bool signed_order = false, signed_text = false, placeholder_on_stock = false;
  for (const Json& content : gemini["contents"]) {
    for (const Json& part : content["parts"]) {
      std::string signature = part.value("thoughtSignature", "");
      if (part.contains("functionCall") && part["functionCall"]["name"] == "order") signed_order = signature == "gsig-call-1";
      if (part.value("text", "") == "Ordered two packs of yeast.") signed_text = signature == "gsig-text-2";
      if (part.contains("functionCall") && part["functionCall"]["name"] == "stock") {
        placeholder_on_stock = signature == "skip_thought_signature_validator";
      }
    }
  }
  EXPECT_TRUE(signed_order);
  EXPECT_TRUE(signed_text);
  EXPECT_TRUE(placeholder_on_stock);  // Claude's call, replayed to Gemini 3
  Json gemini25 = Render(events, For(Provider::kGemini, "gemini-2.5-pro"));
  EXPECT_FALSE(Has(gemini25, "thoughtSignature"));  // neither its reasoning nor a placeholder

  Json openai = Render(events, For(Provider::kOpenAI, "o4-mini"));
  for (const char* other : {"sig-", "gsig-", "redacted-", "enc-openai", "Summary of thought.", "skip_thought"}) {
    EXPECT_FALSE(Has(openai, other)) << other;
  }
}

TEST(RenderReasoningTest, AnthropicThinkingOpensItsMessageInJournalOrder) {
  Json body = Render(Script("merged"), For(Provider::kAnthropic, "claude-sonnet-4-5"));
  const Json& messages = body["messages"];
  ASSERT_GE(messages.size(), 6u);
  std::vector<std::string> types, marks;
  for (const Json& block : messages[1]["content"]) {
    types.push_back(block["type"]);
    if (block.contains("signature")) marks.push_back(block["signature"]);
    if (block.contains("data")) marks.push_back(block["data"]);
  }
  EXPECT_EQ(types, (std::vector<std::string>{"thinking", "redacted_thinking", "thinking", "text", "tool_use", "tool_use"}));
  EXPECT_EQ(marks, (std::vector<std::string>{"sig-m-1", "redacted-m-2", "sig-m-3"}));
  // Opus's text and Sonnet's reasoning and text, split by a switch, share one message.
  const Json& merged = messages[5]["content"];
  ASSERT_EQ(merged.size(), 3u);
  EXPECT_EQ(merged[0]["signature"], "sig-m-4");
  EXPECT_EQ(merged[1]["text"], "Starting the rye dough.");
  EXPECT_EQ(merged[2]["text"], "It will proof for three hours.");
}

TEST(RenderReasoningTest, GeminiSignatureWithoutTextGoesOnTheNextPart) {
  Json body = Render(Script("signatures"), For(Provider::kGemini, "gemini-3-pro-preview"));
  std::vector<std::string> parts;  // "thought|call|text:signature" for each model part
  for (const Json& content : body["contents"]) {
    if (content["role"] != "model") continue;
    for (const Json& part : content["parts"]) {
      std::string kind = part.value("thought", false) ? "thought" : part.contains("functionCall") ? "call" : "text";
      if (part.contains("text")) {
        EXPECT_FALSE(part["text"].get<std::string>().empty()) << part.dump();
      }
      parts.push_back(kind + ":" + part.value("thoughtSignature", ""));
    }
  }
  EXPECT_EQ(parts, (std::vector<std::string>{"thought:gsig-a1", "call:gsig-a2",      // after a signed thought
                                             "thought:gsig-b1", "text:gsig-b2",      // onto the next thought
                                             "call:gsig-c2",                         // the nearer of two
                                             "text:gsig-e1"}));                      // past a blank text
  EXPECT_FALSE(Has(body, "gsig-c1"));
  EXPECT_FALSE(Has(body, "gsig-d1"));  // no output after it in its step
}

// The signatures of the thinking blocks in an Anthropic request, in order.
std::vector<std::string> ThinkingSent(const Json& body) {
  std::vector<std::string> sent;
  for (const Json& message : body["messages"]) {
    for (const Json& block : message["content"]) {
      if (block["type"] == "thinking") sent.push_back(block["signature"]);
    }
  }
  return sent;
}

TEST(RenderReasoningTest, AnthropicThinkingGoesBackWholePerTurnOrNotAtAll) {
  std::vector<Event> events = Script("turns");
  Json whole = Render(events, For(Provider::kAnthropic, "claude-opus-4-1"));
  // Turn 1's loop keeps the thinking of each call's step and of the step after its result;
  // turns 2 and 4 lose theirs (a reasoning not sendable, one with no output after it); turn 3
  // keeps its own though another model's reasoning is in it.
  EXPECT_EQ(ThinkingSent(whole), (std::vector<std::string>{"sig-t1-1", "sig-t1-2", "sig-t1-3", "sig-t3-1",
                                                           "sig-t5-1", "sig-t5-2", "sig-t5-3"}));
  EXPECT_TRUE(Has(whole, "The proofing room is at 70% humidity"));  // the outputs stay
  EXPECT_TRUE(Has(whole, "toolu_yeast"));
  for (const char* withheld : {"sig-t2-1", "sig-t4-1", "sig-t4-2", "sig-sonnet", "A summary kept"}) {
    EXPECT_FALSE(Has(whole, withheld)) << withheld;
  }

  // The window keeps turn 5 from its user message on, or from its first call on (the user
  // message alone dropped): its thinking is whole either way.
  for (uint64_t budget : {310, 295}) {
    Json kept = Render(events, For(Provider::kAnthropic, "claude-opus-4-1", budget));
    EXPECT_TRUE(Has(kept, "[Earlier conversation omitted")) << budget;
    EXPECT_EQ(ThinkingSent(kept), (std::vector<std::string>{"sig-t5-1", "sig-t5-2", "sig-t5-3"})) << budget;
  }
  // The window drops the turn's first call: none of the turn's thinking is sent.
  Json cut = Render(events, For(Provider::kAnthropic, "claude-opus-4-1", 275));
  EXPECT_FALSE(Has(cut, "toolu_rye"));
  EXPECT_TRUE(Has(cut, "toolu_white"));
  EXPECT_TRUE(ThinkingSent(cut).empty()) << cut.dump();
  EXPECT_FALSE(Has(cut, "redacted_thinking"));
}

TEST(RenderLostTest, ALostResultBecomesAnErrorAndAnOrphanIsNeverAToolResult) {
  std::vector<Event> events = Script("lost");
  Json openai = Render(events, For(Provider::kOpenAI, "gpt-4.1"));
  const Json& messages = openai["messages"];
  std::vector<std::string> call_ids, result_ids;
  std::string lost_content, orphan_text;
  for (const Json& m : messages) {
    for (const Json& call : m.value("tool_calls", Json::array())) call_ids.push_back(call["id"]);
    if (m["role"] == "tool") result_ids.push_back(m["tool_call_id"]);
    if (m["role"] == "tool" && result_ids.size() == 1) lost_content = m["content"];
    if (m["role"] == "user" && m["content"].get<std::string>().find("call_from_elsewhere") != std::string::npos) {
      orphan_text = m["content"];
    }
  }
  ASSERT_EQ(call_ids.size(), 3u);
  EXPECT_EQ(call_ids, result_ids);
  EXPECT_EQ(call_ids[0].size(), 29u);
  EXPECT_EQ(call_ids[0].rfind("call_", 0), 0u);
  EXPECT_EQ(call_ids[0].find_first_not_of("0123456789abcdef", 5), std::string::npos) << call_ids[0];
  EXPECT_EQ(call_ids[1], "dup");
  EXPECT_EQ(call_ids[2], "dup_2");
  EXPECT_EQ(lost_content, std::string("Error: ") + kLostResultText);
  EXPECT_EQ(orphan_text, OrphanNoteText("call_from_elsewhere", "stray output"));
  EXPECT_TRUE(Has(openai, "pong 1"));
  EXPECT_TRUE(Has(openai, "pong 2"));

  Json anthropic = Render(events, For(Provider::kAnthropic, "claude-sonnet-4-5"));
  int lost = 0;
  for (const Json& m : anthropic["messages"]) {
    for (const Json& block : m["content"]) {
      if (block["type"] == "tool_result") {
        EXPECT_NE(block["tool_use_id"], "call_from_elsewhere");
      }
      if (block["type"] == "tool_result" && block["content"] == kLostResultText) {
        ++lost;
        EXPECT_EQ(block["is_error"], true);
      }
    }
  }
  EXPECT_EQ(lost, 1);
}

TEST(RenderNamesTest, ToolNamesAndCallIdsEveryProviderAccepts) {
  std::vector<Event> events;
  auto add = [&](const std::string& type, Json data) {
    events.push_back(testing::MakeEvent(type, std::move(data), testing::TimestampAfter(events.size()),
                                        events.empty() ? nullptr : &events.back()));
  };
  const std::string long_name = "tool-" + std::string(80, 'n');
  const std::string long_id(41, 'i');
  add("user_message", {{"text", "go"}});
  add("tool_defined", {{"name", "web.search"}, {"description", "d"}, {"parameters", {{"type", "object"}}}});
  add("tool_call", {{"call_id", "ok-id_1"}, {"name", "web.search"}, {"arguments", Json::object()}});
  add("tool_call", {{"call_id", long_id}, {"name", "2fast"}, {"arguments", Json::object()}});
  add("tool_call", {{"call_id", "ok-id_1"}, {"name", long_name}, {"arguments", Json::object()}});
  Conversation conversation = BuildConversation(events, For(Provider::kAnthropic, "m"), ByteTokenEstimator());
  ASSERT_EQ(conversation.units.size(), 4u);
  const ToolCall& web = *conversation.units[1].call;
  const ToolCall& fast = *conversation.units[2].call;
  const ToolCall& longest = *conversation.units[3].call;
  EXPECT_EQ(web.id, "ok-id_1");
  EXPECT_EQ(web.name.substr(0, 11), "web_search_");
  EXPECT_EQ(web.name.size(), 19u);
  EXPECT_EQ(conversation.tools[0].name, web.name);  // the declaration uses the same name
  EXPECT_EQ(fast.id.substr(0, 5), "call_");
  EXPECT_EQ(fast.id.size(), 29u);
  EXPECT_EQ(fast.name.substr(0, 7), "_2fast_");
  EXPECT_EQ(longest.id, "ok-id_1_2");  // the same journal id twice: distinct ids
  EXPECT_EQ(longest.name.size(), 64u);
  EXPECT_EQ(longest.name.substr(0, 6), "tool-n");
  // Called but not declared: declared by the renderer, in name order, after the defined ones.
  ASSERT_EQ(conversation.tools.size(), 3u);
  EXPECT_EQ(conversation.tools[1].name, fast.name);
  EXPECT_EQ(conversation.tools[2].name, longest.name);
}

TEST(RenderWindowTest, DigestSaysWhatWasDropped) {
  std::vector<Event> events = Script("trim");
  ByteTokenEstimator estimator;
  Conversation conversation = BuildConversation(events, For(Provider::kOpenAI, "gpt-4.1"), estimator);
  ASSERT_GE(conversation.units.size(), 6u);
  EXPECT_EQ(DigestText(conversation, 6),
            "[Earlier conversation omitted to fit the context window: 2 user messages, 2 assistant messages and 2 tool "
            "calls (tools: stock), from 2026-12-02T16:42:00Z to 2026-12-02T16:49:00Z.]");
  EXPECT_EQ(DigestText(conversation, 1),
            "[Earlier conversation omitted to fit the context window: 1 user message, 0 assistant messages and 0 tool "
            "calls, from 2026-12-02T16:42:00Z to 2026-12-02T16:42:00Z.]");

  Json trimmed = Render(events, For(Provider::kOpenAI, "gpt-4.1", 400));
  const Json& messages = trimmed["messages"];
  ASSERT_GE(messages.size(), 3u);
  EXPECT_EQ(messages[0]["role"], "system");  // always kept
  EXPECT_EQ(messages[1]["role"], "user");
  EXPECT_EQ(messages[1]["content"].get<std::string>().rfind("[Earlier conversation omitted", 0), 0u);
  EXPECT_TRUE(Has(trimmed, "cheese"));  // the newest is kept
  EXPECT_FALSE(Has(trimmed, "How much flour"));  // the oldest is not

  Result<Json> too_small = RenderRequest(events, For(Provider::kOpenAI, "gpt-4.1", 20));
  ASSERT_FALSE(too_small.ok());
  EXPECT_EQ(too_small.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(too_small.status().message().find("--context-tokens 20: too small"), std::string::npos);
}

// One token a byte: a dearer estimate than the default, so the same budget keeps less.
class BytePerToken final : public TokenEstimator {
 public:
  uint64_t Text(std::string_view text) const override { return text.size(); }
  uint64_t PerMessage() const override { return 1; }
};
class Free final : public TokenEstimator {
 public:
  uint64_t Text(std::string_view) const override { return 0; }
  uint64_t PerMessage() const override { return 0; }
};

TEST(RenderTokensTest, DefaultEstimateAndAReplacement) {
  ByteTokenEstimator estimator;
  EXPECT_EQ(estimator.Text(""), 0u);
  EXPECT_EQ(estimator.Text("abcd"), 1u);
  EXPECT_EQ(estimator.Text("abcde"), 2u);
  EXPECT_EQ(estimator.PerMessage(), 4u);

  std::vector<Event> events = Script("trim");
  RenderTarget target = For(Provider::kAnthropic, "claude-sonnet-4-5", 1500);
  Result<Json> by_default = RenderRequest(events, target);
  Result<Json> dearer = RenderRequest(events, target, BytePerToken());
  Result<Json> free = RenderRequest(events, target, Free());
  ASSERT_TRUE(by_default.ok() && dearer.ok() && free.ok());
  EXPECT_LT(dearer->dump().size(), by_default->dump().size());
  EXPECT_FALSE(Has(*free, "[Earlier conversation omitted"));  // everything fits for free
  EXPECT_TRUE(Has(*free, "How much flour"));
}

TEST(RenderTargetTest, TheJournalNamesTheTargetUnlessTheCallerDoes) {
  std::vector<Event> events = Script("reasoning");
  Result<RenderTarget> current = ResolveTarget(events, {});
  ASSERT_TRUE(current.ok());
  EXPECT_EQ(current->provider, Provider::kOpenAI);  // the latest assistant_message
  EXPECT_EQ(current->model, "o4-mini");

  TargetRequest to_gemini;
  to_gemini.provider = "gemini";  // no --model: Gemini's latest model in the journal
  Result<RenderTarget> gemini = ResolveTarget(events, to_gemini);
  ASSERT_TRUE(gemini.ok());
  EXPECT_EQ(gemini->model, "gemini-3-pro-preview");

  TargetRequest model_only;
  model_only.model = "gpt-5";
  Result<RenderTarget> gpt5 = ResolveTarget(events, model_only);
  ASSERT_TRUE(gpt5.ok());
  EXPECT_EQ(gpt5->provider, Provider::kOpenAI);
  EXPECT_EQ(gpt5->model, "gpt-5");

  std::vector<Event> text = Script("text");  // OpenAI only
  TargetRequest anthropic;
  anthropic.provider = "anthropic";
  Result<RenderTarget> unnamed = ResolveTarget(text, anthropic);
  ASSERT_FALSE(unnamed.ok());
  EXPECT_EQ(unnamed.status().message(), "--provider anthropic: conversation main names no model of it: give --model");

  TargetRequest unknown;
  unknown.provider = "mistral";
  EXPECT_EQ(ResolveTarget(text, unknown).status().code(), Code::kInvalidArgument);

  TargetRequest nowhere;
  nowhere.conversation = "nowhere";
  EXPECT_EQ(ResolveTarget(text, nowhere).status().code(), Code::kInvalidArgument);
  Result<Json> empty = RenderRequest(text, [] {
    RenderTarget target;
    target.model = "gpt-4.1";
    target.conversation = "nowhere";
    return target;
  }());
  EXPECT_EQ(empty.status().code(), Code::kInvalidArgument);
}

TEST(RenderShapeTest, ConversationsAndAnthropicPrefill) {
  std::vector<Event> events = Script("text");
  RenderTarget side = For(Provider::kOpenAI, "gpt-4.1");
  side.conversation = "side";
  Json only_side = Render(events, side);
  EXPECT_TRUE(Has(only_side, "who bakes"));
  EXPECT_FALSE(Has(only_side, "Sundays"));
  Json main = Render(events, For(Provider::kOpenAI, "gpt-4.1"));
  EXPECT_FALSE(Has(main, "who bakes"));
  EXPECT_EQ(main["messages"][0]["content"], "You are a careful assistant for a small bakery.\n\nAnswer in one sentence.");

  Json anthropic = Render(Script("tools"), For(Provider::kAnthropic, "claude-sonnet-4-5"));
  const Json& last = anthropic["messages"].back();
  EXPECT_EQ(last["role"], "assistant");
  EXPECT_EQ(last["content"].back()["text"], "notes.txt has 5 words; NOTE is on line 2.");  // no trailing space
  EXPECT_EQ(anthropic["max_tokens"], kDefaultAnthropicMaxTokens);
}

}  // namespace
}  // namespace capsule::journal::render
