// capsule render through the real binary: a journal written with `capsule log append`, rendered
// for each provider; the current model taken from the journal; Claude's thinking first in its
// message and whole per turn; a switch A -> B -> A giving A the same bytes; a lost result; the
// context window; the refusals and their exit statuses.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "capsule/base/canonical_json.h"
#include "tests/cli_runner.h"

namespace capsule::testing {
namespace {

using Json = nlohmann::json;

class RenderCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cap_ = MakeTempDir("render") + "/cap";
    RunResult init = RunCapsule({"init", cap_, "--id", "agent-1", "--name", "Agent"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void Append(const std::string& type, const std::string& data) {
    RunResult run = RunCapsule({"log", "append", cap_, "--type", type, "--data", data});
    ASSERT_EQ(run.exit_code, 0) << type << " " << data << ": " << run.err;
  }
  RunResult Render(std::vector<std::string> args) {
    args.insert(args.begin(), {"render", cap_});
    return RunCapsule(args);
  }
  Json RenderJson(const std::vector<std::string>& args) {
    RunResult run = Render(args);
    EXPECT_EQ(run.exit_code, 0) << run.err;
    EXPECT_TRUE(!run.out.empty() && run.out.back() == '\n');
    std::string line = run.out.substr(0, run.out.size() - 1);
    EXPECT_TRUE(IsCanonicalJson(line)) << "one canonical line";
    return Json::parse(line, nullptr, false);
  }
  // A conversation on Claude with signed thinking, a call, its result, and a call whose
  // machine died before the result.
  void WriteConversation() {
    Append("system", R"({"text":"You manage a bakery."})");
    Append("tool_defined", R"({"name":"stock","description":"Stock of an item","parameters":{"type":"object","properties":{"item":{"type":"string"}}}})");
    Append("model_switch", R"({"provider":"anthropic","model":"claude-sonnet-4-5"})");
    Append("user_message", R"({"text":"How much flour and sugar?"})");
    Append("reasoning", R"({"provider":"anthropic","model":"claude-sonnet-4-5","text":"Check both.","signature":"sig-claude"})");
    Append("tool_call", R"({"call_id":"toolu_1","name":"stock","arguments":{"item":"flour"}})");
    Append("tool_call", R"({"call_id":"toolu_2","name":"stock","arguments":{"item":"sugar"}})");
    Append("tool_result", R"({"call_id":"toolu_1","content":"12 kg","is_error":false})");
  }
  std::string cap_;
};

TEST_F(RenderCliTest, EachProviderFromTheSameJournal) {
  WriteConversation();
  // No --provider: the journal's current model, Claude, gets its thinking back.
  Json claude = RenderJson({});
  EXPECT_EQ(claude["model"], "claude-sonnet-4-5");
  EXPECT_EQ(claude["system"], "You manage a bakery.");
  EXPECT_EQ(claude["max_tokens"], 4096);
  const Json& messages = claude["messages"];
  ASSERT_EQ(messages.size(), 3u);
  EXPECT_EQ(messages[1]["content"][0]["type"], "thinking");
  EXPECT_EQ(messages[1]["content"][0]["signature"], "sig-claude");
  EXPECT_EQ(messages[2]["content"][0]["tool_use_id"], "toolu_1");
  EXPECT_EQ(messages[2]["content"][1]["tool_use_id"], "toolu_2");
  EXPECT_EQ(messages[2]["content"][1]["is_error"], true);  // the lost result
  EXPECT_NE(messages[2]["content"][1]["content"].get<std::string>().find("was lost"), std::string::npos);

  Json openai = RenderJson({"--provider", "openai", "--model", "gpt-4.1"});
  EXPECT_EQ(openai["model"], "gpt-4.1");
  EXPECT_EQ(openai["messages"][2]["tool_calls"][0]["function"]["arguments"], "{\"item\":\"flour\"}");
  EXPECT_EQ(openai["messages"][3]["role"], "tool");
  EXPECT_EQ(openai["messages"][4]["tool_call_id"], "toolu_2");
  EXPECT_EQ(openai.dump().find("sig-claude"), std::string::npos);

  Json gemini = RenderJson({"--provider", "gemini", "--model", "gemini-2.5-pro"});
  EXPECT_EQ(gemini["systemInstruction"]["parts"][0]["text"], "You manage a bakery.");
  EXPECT_EQ(gemini["contents"][1]["role"], "model");
  EXPECT_EQ(gemini["contents"][2]["parts"][1]["functionResponse"]["name"], "stock");
  EXPECT_TRUE(gemini["contents"][2]["parts"][1]["functionResponse"]["response"].contains("error"));
  EXPECT_EQ(gemini["tools"][0]["functionDeclarations"][0]["name"], "stock");
  EXPECT_EQ(gemini.dump().find("sig-claude"), std::string::npos);

  EXPECT_EQ(RenderJson({"--max-tokens", "1000"})["max_tokens"], 1000);
  RunResult pretty = Render({"--pretty"});
  EXPECT_EQ(pretty.exit_code, 0);
  EXPECT_EQ(Json::parse(pretty.out), claude);
  EXPECT_NE(pretty.out.find("\n  \"max_tokens\": 4096"), std::string::npos);
}

TEST_F(RenderCliTest, ClaudesThinkingOpensItsMessageAndGoesBackWholePerTurn) {
  Append("model_switch", R"({"provider":"anthropic","model":"claude-sonnet-4-5"})");
  Append("user_message", R"({"text":"Flour, then sugar."})");
  Append("reasoning", R"({"provider":"anthropic","model":"claude-sonnet-4-5","text":"Flour.","signature":"sig-1"})");
  Append("assistant_message", R"({"text":"Checking.","provider":"anthropic","model":"claude-sonnet-4-5"})");
  Append("reasoning", R"({"provider":"anthropic","model":"claude-sonnet-4-5","text":"Call.","signature":"sig-2"})");
  Append("tool_call", R"({"call_id":"toolu_1","name":"stock","arguments":{"item":"flour"}})");
  Append("tool_result", R"({"call_id":"toolu_1","content":"12 kg","is_error":false})");
  Append("user_message", R"({"text":"And sugar?"})");
  Append("reasoning", R"({"provider":"anthropic","model":"claude-sonnet-4-5","text":"Sugar.","signature":"sig-3"})");
  Append("tool_call", R"({"call_id":"toolu_2","name":"stock","arguments":{"item":"sugar"}})");
  Append("tool_result", R"({"call_id":"toolu_2","content":"3 kg","is_error":false})");
  Append("reasoning", R"({"provider":"anthropic","model":"claude-sonnet-4-5","text":"Recorded without its signature."})");
  Append("assistant_message", R"({"text":"3 kg of sugar.","provider":"anthropic","model":"claude-sonnet-4-5"})");
  Json claude = RenderJson({});
  const Json& messages = claude["messages"];
  ASSERT_EQ(messages.size(), 6u);
  std::vector<std::string> first;
  for (const Json& block : messages[1]["content"]) first.push_back(block["type"]);
  EXPECT_EQ(first, (std::vector<std::string>{"thinking", "thinking", "text", "tool_use"}));
  // The second turn has a reasoning that cannot go back, so none of its thinking does.
  EXPECT_EQ(messages[3]["content"].size(), 1u);
  EXPECT_EQ(messages[3]["content"][0]["type"], "tool_use");
  EXPECT_EQ(claude.dump().find("sig-3"), std::string::npos);
}

TEST_F(RenderCliTest, SwitchToGeminiAndBackGivesClaudeTheSameBytes) {
  WriteConversation();
  RunResult before = Render({});
  ASSERT_EQ(before.exit_code, 0) << before.err;
  Append("model_switch", R"({"provider":"gemini","model":"gemini-2.5-pro"})");
  Json on_gemini = RenderJson({});
  EXPECT_TRUE(on_gemini.contains("contents"));
  EXPECT_EQ(on_gemini.dump().find("sig-claude"), std::string::npos);
  Append("model_switch", R"({"provider":"anthropic","model":"claude-sonnet-4-5"})");
  RunResult after = Render({});
  ASSERT_EQ(after.exit_code, 0) << after.err;
  EXPECT_EQ(after.out, before.out);
  // Naming the provider alone finds Claude's model in the journal.
  RunResult named = Render({"--provider", "anthropic"});
  EXPECT_EQ(named.out, before.out);
}

TEST_F(RenderCliTest, ContextWindowAndConversations) {
  Append("system", R"({"text":"Be brief."})");
  const std::string padding(150, '.');
  for (int i = 0; i < 10; ++i) {
    Append("user_message", R"({"text":"Question number )" + std::to_string(i) + " about the oven" + padding + R"("})");
    Append("assistant_message", R"({"text":"Answer number )" + std::to_string(i) + ": two hundred degrees" + padding +
                                    R"(","provider":"openai","model":"gpt-4.1"})");
  }
  Append("user_message", R"({"text":"Side talk","conversation":"side"})");
  Json whole = RenderJson({});
  EXPECT_EQ(whole["messages"].size(), 21u);
  Json window = RenderJson({"--context-tokens", "300"});
  const Json& messages = window["messages"];
  ASSERT_GT(messages.size(), 2u);
  EXPECT_LT(messages.size(), 21u);
  EXPECT_EQ(messages[0]["content"], "Be brief.");
  EXPECT_EQ(messages[1]["content"].get<std::string>().rfind("[Earlier conversation omitted", 0), 0u);
  EXPECT_NE(messages.back()["content"].get<std::string>().find("Answer number 9"), std::string::npos);

  RunResult tiny = Render({"--context-tokens", "10"});
  EXPECT_EQ(tiny.exit_code, 1);
  EXPECT_EQ(tiny.err.rfind("capsule: render: --context-tokens 10: too small", 0), 0u) << tiny.err;
  EXPECT_TRUE(tiny.out.empty());

  Json side = RenderJson({"--conversation", "side", "--provider", "openai", "--model", "gpt-4.1"});
  ASSERT_EQ(side["messages"].size(), 1u);  // the system event is main's (it names no conversation)
  EXPECT_EQ(side["messages"][0]["content"], "Side talk");
}

TEST_F(RenderCliTest, Refusals) {
  RunResult empty = Render({});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_EQ(empty.err, "capsule: render: conversation main: names no provider (no model_switch or assistant_message): "
                       "give --provider and --model\n");
  RunResult nothing = Render({"--provider", "openai", "--model", "gpt-4.1"});
  EXPECT_EQ(nothing.exit_code, 1);
  EXPECT_NE(nothing.err.find("nothing to send"), std::string::npos) << nothing.err;

  Append("user_message", R"({"text":"hi"})");
  Append("assistant_message", R"({"text":"hello","provider":"openai","model":"gpt-4.1"})");
  RunResult no_model = Render({"--provider", "anthropic"});
  EXPECT_EQ(no_model.exit_code, 1);
  EXPECT_EQ(no_model.err, "capsule: render: --provider anthropic: conversation main names no model of it: give --model\n");
  EXPECT_EQ(Render({"--provider", "mistral"}).exit_code, 2);
  EXPECT_EQ(Render({"--context-tokens", "0"}).exit_code, 2);
  EXPECT_EQ(RunCapsule({"render"}).exit_code, 2);
  RunResult missing = RunCapsule({"render", cap_ + "-absent"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(missing.err.rfind("capsule: ", 0), 0u);
}

}  // namespace
}  // namespace capsule::testing
