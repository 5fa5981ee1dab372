// The pieces of an agent file's import that a file's author controls: times in any offset,
// names that are no agent id, block files read back as written and refused when forged, and
// members the format does not name listed rather than kept.
#include <gtest/gtest.h>

#include "capsule/format/memory_blocks.h"
#include "journal/interop/agent_file.h"
#include "journal/interop/new_capsule.h"

namespace capsule::journal::interop {
namespace {

TEST(InteropTest, TimesBecomeUtcSeconds) {
  EXPECT_EQ(ToUtcSeconds("2025-10-21T16:55:56.456634+00:00"), "2025-10-21T16:55:56Z");
  EXPECT_EQ(ToUtcSeconds("2025-10-21T18:55:56+02:00"), "2025-10-21T16:55:56Z");
  EXPECT_EQ(ToUtcSeconds("2025-12-31T23:30:00-01:00"), "2026-01-01T00:30:00Z");
  EXPECT_EQ(ToUtcSeconds("2025-10-21 16:55:56Z"), "2025-10-21T16:55:56Z");
  EXPECT_EQ(ToUtcSeconds("yesterday"), std::nullopt);
  EXPECT_EQ(ToUtcSeconds("2025-10-21T16:55:56+0"), std::nullopt);
}

TEST(InteropTest, AgentIdsFromNames) {
  EXPECT_EQ(AgentIdFromName("Lamp helper"), "Lamp-helper");
  EXPECT_EQ(AgentIdFromName("../etc/passwd"), "-etc-passwd");
  EXPECT_EQ(AgentIdFromName("..."), "agent");
  EXPECT_EQ(AgentIdFromName(std::string(300, 'a')).size(), 128u);
}

TEST(InteropTest, BlockFilesReadBackAsWritten) {
  MemoryBlock block{"human", "Line one\nwith \"quotes\": and a colon", "value\n---\nnot front matter\n", 100, true};
  Result<MemoryBlock> back = ParseMemoryBlock("memory/blocks/human.md", MemoryBlockText(block));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->description, block.description);
  EXPECT_EQ(back->value, block.value);
  EXPECT_EQ(back->limit, block.limit);
  EXPECT_TRUE(back->read_only);
  Result<MemoryBlock> wrong = ParseMemoryBlock("memory/blocks/persona.md", MemoryBlockText(block));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().ToString().find("label human does not match the file's name"), std::string::npos);
  Result<MemoryBlock> bad_label = ParseMemoryBlock("memory/blocks/x.md", "---\nlabel: a/b\n---\n");
  ASSERT_FALSE(bad_label.ok());
  EXPECT_NE(bad_label.status().ToString().find("must be 1 to 64 of A-Z a-z 0-9 _ -"), std::string::npos);
  EXPECT_EQ(InstructionsWithBlocks("Before {CORE_MEMORY} after", {}), "Before  after");
  EXPECT_EQ(InstructionsWithBlocks("Only", {}), "Only");
}

TEST(InteropTest, UnknownMembersAreListedNotKept) {
  Json file = {{"agents", {{{"id", "agent-0"}, {"name", "A"}, {"colour", "blue"}, {"messages", Json::array()},
                            {"llm_config", {{"model", "m"}, {"model_endpoint_type", "openai"}, {"context_window", 8}, {"shiny", true}}}}}},
               {"blocks", Json::array()}, {"tools", Json::array()}, {"groups", {{{"id", "g"}}}}};
  Result<AgentFileImport> read = ReadAgentFile(file, std::nullopt);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(read->dropped, (std::vector<std::string>{"agents[0].colour", "agents[0].llm_config.shiny", "groups"}));
  const NewCapsule& capsule = read->capsules[0];
  EXPECT_FALSE(capsule.settings["agent"].contains("colour"));
  ASSERT_EQ(capsule.events.size(), 1u);
  EXPECT_EQ(capsule.events[0].type, "model_switch");
  EXPECT_FALSE(capsule.events[0].data["letta"]["llm_config"].contains("shiny"));
  Result<AgentFileImport> single = ReadAgentFile({{"messages", Json::array()}, {"llm_config", Json::object()}}, std::nullopt);
  ASSERT_FALSE(single.ok());
  EXPECT_NE(single.status().ToString().find("single-agent form"), std::string::npos);
}

}  // namespace
}  // namespace capsule::journal::interop
