// The agent's instructions and skills as MCP resources: listed, read whole or in parts,
// never through a link, never outside a skill's folder.
#include "mcp/harness_resources.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "journal/test_util.h"
#include "mcp/reply_bounds.h"
#include "mcp/server.h"

namespace capsule::mcp {
namespace {

using journal::testing::MachineName;
using journal::testing::MakeTempDir;
using journal::testing::MakeTestCapsule;

constexpr char kSkill[] = "---\nname: pdf-fill\ndescription: Fill in PDF forms with the fields the user gives\n---\nRun fill.py\n";

class HarnessResourcesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("mcp-harness") + "/cap";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
    Put("harness/instructions.md", "# Standing instructions\nAnswer in French.\n");
    Put("harness/skills/pdf-fill/SKILL.md", kSkill);
    Put("harness/skills/pdf-fill/scripts/fill.py", "print('filled')\n");
    Put("harness/skills/broken/SKILL.md", "no front matter\n");
    Result<std::unique_ptr<Server>> server = Server::Open({dir_, dir_, {}});
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }
  void Put(const std::string& rel, const std::string& text) {
    ASSERT_TRUE(MakeDirectories(DirName(JoinPath(dir_, rel))).ok());
    ASSERT_TRUE(WriteFileAtomic(JoinPath(dir_, rel), text).ok());
  }
  Json Request(const std::string& method, const Json& params) {
    Json request = {{"jsonrpc", "2.0"}, {"id", 1}, {"method", method}, {"params", params}};
    std::optional<std::string> reply = server_->HandleLine(request.dump());
    EXPECT_TRUE(reply.has_value());
    EXPECT_LE(reply->size(), kMaxReplyBytes);
    return ParseJson(*reply, "reply").value();
  }
  Json Read(const std::string& uri) { return Request("resources/read", {{"uri", uri}}); }

  std::string dir_;
  std::unique_ptr<Server> server_;
};

TEST_F(HarnessResourcesTest, InstructionsAndSkillsAreListedAndRead) {
  Json listed = Request("resources/list", Json::object())["result"]["resources"];
  ASSERT_GE(listed.size(), 2u);
  EXPECT_EQ(listed[0]["uri"], "capsule://agent-1/instructions");
  EXPECT_EQ(listed[1]["uri"], "capsule://agent-1/skills/pdf-fill");
  EXPECT_EQ(listed[1]["description"], "Fill in PDF forms with the fields the user gives");
  for (const Json& entry : listed) EXPECT_NE(entry["uri"], "capsule://agent-1/skills/broken");

  Json instructions = Read("capsule://agent-1/instructions")["result"]["contents"][0];
  EXPECT_EQ(instructions["text"], "# Standing instructions\nAnswer in French.\n");
  EXPECT_EQ(instructions["mimeType"], "text/markdown");
  EXPECT_EQ(Read("capsule://agent-1/skills/pdf-fill")["result"]["contents"][0]["text"], kSkill);
  Json file = Read("capsule://agent-1/skills/pdf-fill/scripts/fill.py")["result"]["contents"][0];
  EXPECT_EQ(file["text"], "print('filled')\n");
  EXPECT_EQ(file["mimeType"], "text/plain");
}

TEST_F(HarnessResourcesTest, LongInstructionsComeInParts) {
  std::string text;
  for (int i = 0; text.size() < (3u << 20) / 2; ++i) text += "Rule " + std::to_string(i) + ": be brief.\n";
  Put("harness/instructions.md", text);
  Json first = Read("capsule://agent-1/instructions")["result"]["contents"][0];
  const int64_t parts = first["_meta"]["capsule/parts"].get<int64_t>();
  ASSERT_GT(parts, 1);
  std::string whole = first["text"].get<std::string>();
  for (int64_t k = 1; k < parts; ++k) {
    whole += Read("capsule://agent-1/instructions?part=" + std::to_string(k))["result"]["contents"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(whole, text);
}

TEST_F(HarnessResourcesTest, NoLinkIsFollowedAndNothingOutsideASkillIsServed) {
  ASSERT_EQ(::symlink("/etc/passwd", JoinPath(dir_, "harness/skills/pdf-fill/passwd").c_str()), 0);
  ASSERT_TRUE(MakeDirectories(JoinPath(dir_, "harness/skills/linked")).ok());
  ASSERT_EQ(::symlink(JoinPath(dir_, "harness/skills/pdf-fill/SKILL.md").c_str(),
                      JoinPath(dir_, "harness/skills/linked/SKILL.md").c_str()),
            0);
  for (const char* uri : {"capsule://agent-1/skills/pdf-fill/passwd", "capsule://agent-1/skills/linked",
                          "capsule://agent-1/skills/pdf-fill/../../../.capsule/holder.json",
                          "capsule://agent-1/skills/pdf-fill/%2E%2E/%2E%2E/instructions.md",
                          "capsule://agent-1/skills/none", "capsule://agent-1/skills/pdf-fill/.hidden",
                          "capsule://agent-1/skills//x"}) {
    Json reply = Read(uri);
    EXPECT_EQ(reply["error"]["code"], kResourceNotFound) << uri << " " << reply.dump();
    EXPECT_EQ(reply.dump().find("root:"), std::string::npos) << uri;
  }
  Json listed = Request("resources/list", Json::object())["result"]["resources"];
  for (const Json& entry : listed) EXPECT_NE(entry["uri"], "capsule://agent-1/skills/linked");
}

}  // namespace
}  // namespace capsule::mcp
