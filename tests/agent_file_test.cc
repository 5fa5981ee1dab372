// capsule import and export of a Letta Agent File through the real binary, on
// tests/agentfile/lighthouse.af (two agents, blocks, tools with source code, reasoning with a
// signature and redacted, an error result, secrets, members the format does not name):
// each agent becomes a capsule that verifies and renders for the three providers with its
// memory blocks in the system text; no secret value lands; what has no place is listed as
// dropped; import -> export -> import gives the same capsule and the same file; a file that
// cannot be placed is refused, naming what, with nothing written.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"

namespace capsule::testing {
namespace {

using Json = nlohmann::json;

constexpr char kLighthouse[] = "tests/agentfile/lighthouse.af";
constexpr char kRefusedRole[] = "tests/agentfile/refused_role.af";

std::string Read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void Write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// Every event of the capsule's journal without what names the machine that wrote it.
Json Events(const std::string& dir) {
  RunResult log = RunCapsule({"log", dir, "--json"});
  EXPECT_EQ(log.exit_code, 0) << log.err;
  Json events = Json::array();
  std::istringstream lines(log.out);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    Json event = Json::parse(line, nullptr, false);
    if (event.is_array()) {
      for (const Json& e : event) events.push_back({{"type", e["type"]}, {"data", e["data"]}, {"ts", e["ts"]}});
    } else if (event.contains("events")) {
      for (const Json& e : event["events"]) events.push_back({{"type", e["type"]}, {"data", e["data"]}, {"ts", e["ts"]}});
    } else {
      events.push_back({{"type", event["type"]}, {"data", event["data"]}, {"ts", event["ts"]}});
    }
  }
  return events;
}

// The conversation rendered for `provider`, with a model of its own (the journal names only
// the agent's).
Json Render(const std::string& dir, const std::string& provider) {
  const char* model = provider == "openai" ? "gpt-4.1-mini" : provider == "anthropic" ? "claude-sonnet-4-5" : "gemini-2.5-pro";
  RunResult run = RunCapsule({"render", dir, "--provider", provider, "--model", model});
  EXPECT_EQ(run.exit_code, 0) << provider << ": " << run.err;
  return Json::parse(run.out, nullptr, false);
}

class AgentFileTest : public ::testing::Test {
 protected:
  void SetUp() override { root_ = MakeTempDir("agentfile"); }
  std::string root_;
};

TEST_F(AgentFileTest, EachAgentACapsuleWithItsBlocksToolsAndHistoryAndNoSecretValue) {
  std::string dir = root_ + "/lighthouse";
  RunResult run = RunCapsule({"import", kLighthouse, dir, "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  Json report = Json::parse(run.out);
  ASSERT_EQ(report["agents"].size(), 2u);
  EXPECT_EQ(report["agents"][0]["id"], "Scribe");
  EXPECT_EQ(report["agents"][1]["id"], "Lamp-helper");
  // What has no place, on standard error and in --json.
  for (const char* dropped : {"agents[0].frobnicate_level", "agents[0].llm_config.display_name",
                              "agents[0].messages[*].approvals", "blocks[*].template_name", "file.skills",
                              "tools[*].enable_parallel_execution"}) {
    EXPECT_NE(run.err.find(std::string("capsule: dropped (no place in a capsule): ") + dropped), std::string::npos)
        << dropped << "\n" << run.err;
    bool listed = false;
    for (const Json& item : report["dropped"]) listed = listed || item == dropped;
    EXPECT_TRUE(listed) << dropped;
  }
  EXPECT_EQ(report["secrets"], Json({"NOTES_API_KEY", "NOTES_URL", "TIDE_TOKEN"}));

  std::string scribe = dir + "/Scribe";
  RunResult verify = RunCapsule({"verify", scribe});
  EXPECT_EQ(verify.exit_code, 0) << verify.out << verify.err;
  EXPECT_EQ(Read(scribe + "/harness/instructions.md"), "You are Scribe, who keeps a lighthouse keeper's logbook.\nWrite plainly.");
  EXPECT_EQ(Read(scribe + "/memory/blocks/human.md"),
            "---\nlabel: human\ndescription: \"The person: what I know of them\"\nlimit: 2000\nread_only: false\n---\n"
            "The keeper is Ada.\nShe likes: tea, \"exact\" times.");
  EXPECT_NE(Read(scribe + "/memory/blocks/persona.md").find("read_only: true"), std::string::npos);
  // Secrets: names in the spec, values nowhere in the capsule.
  Json spec = Json::parse(Read(scribe + "/environment/spec.json"));
  EXPECT_EQ(spec["secrets"], Json({"NOTES_API_KEY", "NOTES_URL", "TIDE_TOKEN"}));
  EXPECT_NE(Shell("grep -r -q -a -e notes.example " + scribe), 0) << "no variable's value lands";
  EXPECT_NE(Shell("grep -r -q -a -e SECRET-4242 -e SECRET-9999 " + dir), 0) << "no secret value lands";

  // The history, in order, on one conversation, with the model of llm_config.
  Json events = Events(scribe);
  std::vector<std::string> types;
  for (const Json& e : events) types.push_back(e["type"]);
  EXPECT_EQ(types, (std::vector<std::string>{"model_switch", "tool_defined", "tool_defined", "user_message", "reasoning",
                                             "assistant_message", "tool_call", "tool_result", "assistant_message",
                                             "user_message", "reasoning", "tool_call", "tool_result", "system",
                                             "assistant_message"}));
  EXPECT_EQ(events[0]["data"]["provider"], "anthropic");
  EXPECT_EQ(events[0]["data"]["model"], "claude-sonnet-4-5");
  EXPECT_EQ(events[3]["ts"], "2026-03-01T21:04:05Z");
  EXPECT_EQ(events[6]["data"]["arguments"], Json({{"text", "Gale NW"}, {"urgent", true}}));
  EXPECT_EQ(events[10]["data"]["encrypted"], "ZW5jcnlwdGVk");
  EXPECT_EQ(events[12]["data"]["is_error"], true);
  EXPECT_EQ(events[7]["data"]["is_error"], false);
  // The tool's source code is an attachment named from its definition.
  std::string sha = events[1]["data"]["letta"]["source_code"]["sha256"];
  EXPECT_EQ(Read(scribe + "/memory/attachments/" + sha).substr(0, 14), "def send_note(");
  Json settings = Json::parse(Read(scribe + "/memory/agent_file.json"));
  EXPECT_EQ(settings["in_context_message_ids"], Json({"message-0", "message-5", "message-6", "message-7", "message-8", "message-9"}));
  EXPECT_EQ(settings["agent"]["tags"], Json({"lighthouse", "logbook"}));
  EXPECT_EQ(settings["agent"]["tool_rules"][0]["tool_name"], "send_note");

  // Rendered for each provider, the blocks in the system text as Letta puts them.
  Json claude = Render(scribe, "anthropic");
  std::string system = claude["system"].is_string() ? claude["system"].get<std::string>() : claude["system"].dump();
  EXPECT_NE(system.find("Write plainly.\n\n<memory_blocks>\nThe following memory blocks are currently engaged in your core memory unit:\n\n<human>\n<description>\nThe person: what I know of them\n</description>\n<metadata>\n- chars_current=49\n- chars_limit=2000\n</metadata>\n<value>\nThe keeper is Ada.\n"),
            std::string::npos) << system;
  EXPECT_NE(system.find("<persona>\n<description>\nWho I am\n</description>\n<metadata>\n- read_only=true\n"), std::string::npos) << system;
  EXPECT_NE(claude.dump().find("sig-scribe-1"), std::string::npos) << "Claude's own signed thinking goes back to it";
  EXPECT_EQ(claude["tools"].size(), 2u);
  Json openai = Render(scribe, "openai");
  EXPECT_EQ(openai["messages"][0]["role"], "system");
  EXPECT_NE(openai["messages"][0]["content"].get<std::string>().find("<persona>"), std::string::npos);
  EXPECT_EQ(openai["messages"][0]["content"].get<std::string>().find("<lamp_state>"), std::string::npos) << "the other agent's block";
  Json gemini = Render(scribe, "gemini");
  EXPECT_TRUE(gemini.contains("systemInstruction"));
  Json helper = Render(dir + "/Lamp-helper", "openai");
  EXPECT_NE(helper["messages"][0]["content"].get<std::string>().find("<lamp_state>"), std::string::npos);
  EXPECT_EQ(helper["model"], "gpt-4.1-mini");
}

TEST_F(AgentFileTest, ImportExportImportGivesTheSameCapsuleAndTheSameFile) {
  std::string first = root_ + "/first", second = root_ + "/second";
  ASSERT_EQ(RunCapsule({"import", kLighthouse, first, "--agent", "Scribe"}).exit_code, 0);
  RunResult exported = RunCapsule({"export", first, "--format", "af", "-o", root_ + "/scribe.af"});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  RunResult again = RunCapsule({"import", root_ + "/scribe.af", second});
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_EQ(again.err.find("dropped"), std::string::npos) << "an exported file holds only what has a place: " << again.err;
  EXPECT_EQ(Events(first), Events(second));
  for (const char* file : {"harness/instructions.md", "harness/threads/main.json", "memory/blocks/human.md",
                           "memory/blocks/persona.md", "memory/agent_file.json", "environment/spec.json"}) {
    EXPECT_EQ(Read(first + "/" + file), Read(second + "/" + file)) << file;
  }
  for (const char* provider : {"openai", "anthropic", "gemini"}) EXPECT_EQ(Render(first, provider), Render(second, provider)) << provider;
  // The same file again, on standard output.
  RunResult out = RunCapsule({"export", second, "--format", "af", "-o", "-"});
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_EQ(out.out, Read(root_ + "/scribe.af"));
  // The exported file: the compiled system message first, names of secrets without values.
  Json af = Json::parse(out.out);
  const Json& agent = af["agents"][0];
  EXPECT_EQ(agent["messages"][0]["id"], "message-0");
  EXPECT_NE(agent["messages"][0]["content"][0]["text"].get<std::string>().find("<memory_blocks>"), std::string::npos);
  EXPECT_EQ(agent["tool_exec_environment_variables"], Json({{"NOTES_API_KEY", nullptr}, {"NOTES_URL", nullptr}, {"TIDE_TOKEN", nullptr}}));
  EXPECT_EQ(agent["messages"][2]["tool_calls"][0]["id"], "toolu_01");
  EXPECT_EQ(agent["messages"][2]["content"][0]["signature"], "sig-scribe-1");
}

TEST_F(AgentFileTest, RefusalsNameWhatAndWriteNothing) {
  std::string dir = root_ + "/out/cap";
  auto nothing_written = [&] {
    EXPECT_FALSE(PathExists(root_ + "/out")) << "a refused import leaves no folder";
  };
  RunResult role = RunCapsule({"import", kRefusedRole, dir});
  EXPECT_EQ(role.exit_code, 1);
  EXPECT_NE(role.err.find("agents[1].messages[3].role: \"approval\": a capsule journal has no event for this role"),
            std::string::npos) << role.err;
  nothing_written();

  RunResult unknown = RunCapsule({"import", kLighthouse, dir, "--agent", "Nobody"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("--agent Nobody: no agent of the file has this name or id (it has: Scribe, Lamp helper)"),
            std::string::npos) << unknown.err;
  nothing_written();

  Json doc = Json::parse(Read(kLighthouse));
  doc["blocks"][1]["label"] = "../escape";
  Write(root_ + "/label.af", doc.dump());
  RunResult label = RunCapsule({"import", root_ + "/label.af", dir});
  EXPECT_EQ(label.exit_code, 1);
  EXPECT_NE(label.err.find("memory block label \"../escape\": must be 1 to 64 of A-Z a-z 0-9 _ -"), std::string::npos) << label.err;
  nothing_written();

  doc = Json::parse(Read(kLighthouse));
  doc["agents"][0]["messages"][2]["tool_calls"][0]["function"]["arguments"] = "[1, 2]";
  Write(root_ + "/args.af", doc.dump());
  RunResult args = RunCapsule({"import", root_ + "/args.af", dir});
  EXPECT_EQ(args.exit_code, 1);
  EXPECT_NE(args.err.find("agents[0].messages[2].tool_calls[0].function.arguments: must be a JSON object"), std::string::npos) << args.err;
  nothing_written();

  std::string text = Read(kLighthouse);
  Write(root_ + "/cut.af", text.substr(0, text.size() / 2));
  RunResult cut = RunCapsule({"import", root_ + "/cut.af", dir});
  EXPECT_EQ(cut.exit_code, 1);
  EXPECT_NE(cut.err.find("cut.af"), std::string::npos) << cut.err;
  nothing_written();

  // A provider's body is not taken for an agent file.
  Write(root_ + "/body.json", R"({"model":"gpt-4.1","messages":[]})");
  RunResult body = RunCapsule({"import", root_ + "/body.json", dir});
  EXPECT_EQ(body.exit_code, 1);
  EXPECT_NE(body.err.find("not an agent file (no \"agents\" array)"), std::string::npos) << body.err;
  nothing_written();
}

}  // namespace
}  // namespace capsule::testing
