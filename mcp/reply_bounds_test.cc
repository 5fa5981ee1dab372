// Replies of the MCP server bounded by bytes: long contents cut with a marker and read back
// whole in parts, history in pages by bytes, errors that quote a little of a long value.
#include "mcp/reply_bounds.h"

#include <gtest/gtest.h>

#include "capsule/base/file_io.h"
#include "capsule/format/layout.h"
#include "journal/test_util.h"
#include "mcp/json_rpc.h"
#include "mcp/server.h"

namespace capsule::mcp {
namespace {

using journal::testing::MachineName;
using journal::testing::MakeTempDir;
using journal::testing::MakeTestCapsule;

TEST(ReplyBoundsTest, TextIsCutAtCharactersAndMeasuredAsJson) {
  EXPECT_EQ(JsonTextBytes("a\"b\n\x01"), 1u + 2 + 1 + 2 + 6);
  EXPECT_EQ(JsonTextBytes("é"), 2u);
  // "é" is two bytes: a budget of 3 holds "aé", never half of it.
  EXPECT_EQ(PrefixEnd("aéé", 0, 3), 3u);
  EXPECT_EQ(PrefixEnd("aéé", 0, 2), 1u);
  EXPECT_EQ(PrefixEnd("\x01\x01", 0, 1), 1u);  // at least one character
  const std::string text = std::string(10, 'x') + "é" + std::string(10, 'y');
  std::vector<size_t> starts = PartStarts(text, 11);
  EXPECT_EQ(starts, (std::vector<size_t>{0, 10, 21}));
  EXPECT_EQ(PartStarts("", 11), (std::vector<size_t>{0}));
  EXPECT_EQ(Excerpt("short"), "short");
  const std::string quoted = Excerpt(std::string(5000, 'v'));
  EXPECT_EQ(quoted, std::string(kMaxQuotedBytes, 'v') + "... (5000 bytes)");
  const std::string message = "what: " + std::string(5000, 'w') + ": the reason";
  const std::string bounded = BoundedMessage(message);
  EXPECT_LT(bounded.size(), kMaxErrorBytes + 100);
  EXPECT_EQ(bounded.substr(0, 6), "what: ");
  EXPECT_NE(bounded.find("... (5018 bytes) ..."), std::string::npos) << bounded;
  EXPECT_EQ(bounded.substr(bounded.size() - 12), ": the reason");
  EXPECT_EQ(ErrorReply(1, kInternalError, message)["error"]["message"], bounded);
}

class BoundedRepliesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = MakeTempDir("mcp-bounds") + "/cap";
    ASSERT_TRUE(MakeTestCapsule(dir_, MachineName(1)).ok());
    Result<std::unique_ptr<Server>> server = Server::Open({dir_, dir_, {}});
    ASSERT_TRUE(server.ok()) << server.status().message();
    server_ = std::move(*server);
  }

  // The reply to one request, checked to fit the bound, parsed.
  Json Request(const std::string& method, const Json& params) {
    Json request = {{"jsonrpc", "2.0"}, {"id", ++id_}, {"method", method}, {"params", params}};
    std::optional<std::string> reply = server_->HandleLine(request.dump());
    EXPECT_TRUE(reply.has_value());
    if (!reply) return nullptr;
    EXPECT_LE(reply->size(), kMaxReplyBytes);
    largest_ = std::max(largest_, reply->size());
    Result<Json> parsed = ParseJson(*reply, "reply");
    EXPECT_TRUE(parsed.ok());
    return parsed.ok() ? *parsed : Json(nullptr);
  }
  Json Ok(const std::string& tool, const Json& arguments) {
    Json result = Request("tools/call", {{"name", tool}, {"arguments", arguments}})["result"];
    EXPECT_FALSE(result.value("isError", false)) << result.dump().substr(0, 2000);
    return ParseJson(result["content"][0]["text"].get<std::string>(), "result").value();
  }
  std::string Read(const std::string& uri) {
    Json reply = Request("resources/read", {{"uri", uri}});
    EXPECT_TRUE(reply.contains("result")) << reply.dump().substr(0, 2000);
    return reply["result"]["contents"][0]["text"].get<std::string>();
  }

  std::string dir_;
  std::unique_ptr<Server> server_;
  int id_ = 0;
  size_t largest_ = 0;
};

// Content that JSON escapes (quotes, newlines, a control character) and that is not ASCII.
std::string LongContent(size_t bytes, char seed) {
  std::string text;
  for (size_t i = 0; text.size() < bytes; ++i) {
    text += seed;
    text += i % 7 == 0 ? "\"é\n" : i % 11 == 0 ? "\x01" : "ab";
  }
  return text;
}

TEST_F(BoundedRepliesTest, ALongContentIsCutAndReadBackWholeInParts) {
  const std::string content = LongContent(3 << 20, 'q');
  Json appended = Ok("history_append", {{"role", "user"}, {"content", content}})["message"];
  ASSERT_TRUE(appended.contains("content_cut"));
  const Json cut = appended["content_cut"];
  EXPECT_EQ(cut["bytes"], content.size());
  EXPECT_EQ(cut["uri"], "capsule://agent-1/messages/" + appended["id"].get<std::string>());
  const std::string shown = appended["content"].get<std::string>();
  EXPECT_EQ(content.compare(0, shown.size(), shown), 0);
  EXPECT_LE(JsonTextBytes(shown), kInlineContentBytes);
  EXPECT_GT(shown.size(), kInlineContentBytes / 4);

  std::string whole;
  for (int64_t k = 0; k < cut["parts"].get<int64_t>(); ++k) {
    whole += Read(cut["uri"].get<std::string>() + "?part=" + std::to_string(k));
  }
  EXPECT_EQ(whole, content);
  EXPECT_GT(cut["parts"].get<int64_t>(), 4);
  Json past = Request("resources/read", {{"uri", cut["uri"].get<std::string>() + "?part=" + cut["parts"].dump()}});
  EXPECT_EQ(past["error"]["code"], kResourceNotFound);
  // history_load shows it cut the same way; short messages stay whole.
  Ok("history_append", {{"role", "user"}, {"content", "short"}});
  Json page = Ok("history_load", Json::object())["messages"];
  ASSERT_EQ(page.size(), 2u);
  EXPECT_EQ(page[0]["content_cut"], cut);
  EXPECT_EQ(page[1]["content"], "short");
  EXPECT_FALSE(page[1].contains("content_cut"));
  EXPECT_LT(largest_, kMaxReplyBytes);
}

TEST_F(BoundedRepliesTest, HistoryComesInPagesByBytesWithACursor) {
  constexpr int kMessages = 24;  // 40 KiB each, every one whole in a page, a few pages in all
  for (int i = 0; i < kMessages; ++i) {
    Ok("history_append", {{"role", "user"}, {"content", LongContent(40 << 10, static_cast<char>('a' + i))}});
  }
  std::vector<int64_t> seqs;
  int pages = 0;
  Json cursor = nullptr;
  do {
    Json arguments = {{"limit", 1000}};
    if (!cursor.is_null()) arguments["before_seq"] = cursor;
    Json page = Ok("history_load", arguments);
    ++pages;
    ASSERT_FALSE(page["messages"].empty());
    for (auto it = page["messages"].rbegin(); it != page["messages"].rend(); ++it) {
      EXPECT_FALSE(it->contains("content_cut"));
      seqs.push_back((*it)["seq"].get<int64_t>());
    }
    cursor = page["next_before_seq"];
  } while (!cursor.is_null());
  EXPECT_GE(pages, 3);
  ASSERT_EQ(seqs.size(), static_cast<size_t>(kMessages));
  for (int i = 0; i < kMessages; ++i) EXPECT_EQ(seqs[i], kMessages - i);
  // The conversation resource pages the same way, each page naming the one before.
  std::string uri = "capsule://agent-1/conversations/main";
  size_t read = 0;
  for (int guard = 0; guard < 100 && !uri.empty(); ++guard) {
    Json page = ParseJson(Read(uri), "page").value();
    read += page["messages"].size();
    uri = page["next"].is_null() ? "" : page["next"].get<std::string>();
  }
  EXPECT_EQ(read, static_cast<size_t>(kMessages));
}

TEST_F(BoundedRepliesTest, ErrorsQuoteLittleOfALongValue) {
  const std::string huge(100000, 'z');
  Json unknown = Request("tools/call", {{"name", huge}, {"arguments", Json::object()}});
  EXPECT_LT(unknown["error"]["message"].get<std::string>().size(), 1000u);
  EXPECT_NE(unknown["error"]["message"].get<std::string>().find("(100000 bytes)"), std::string::npos);
  Json role = Request("tools/call", {{"name", "history_append"}, {"arguments", {{"role", huge}, {"content", "x"}}}});
  const std::string said = role["result"]["content"][0]["text"].get<std::string>();
  EXPECT_LT(said.size(), 1000u) << said.substr(0, 300);
  EXPECT_NE(said.find("must be one of"), std::string::npos) << said.substr(0, 300);
  Json key = Request("tools/call", {{"name", "runs_in_flight"}, {"arguments", {{huge, 1}}}});
  EXPECT_LT(key["result"]["content"][0]["text"].get<std::string>().size(), 1000u);
  Json uri = Request("resources/read", {{"uri", "capsule://agent-1/" + huge}});
  EXPECT_LT(uri.dump().size(), 2000u);
  Json method = Request(huge, Json::object());
  EXPECT_LT(method.dump().size(), 1000u);
  std::optional<std::string> bad = server_->HandleLine("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"" + huge + "\\x\"}");
  ASSERT_TRUE(bad);
  EXPECT_LT(bad->size(), 1000u);
}

}  // namespace
}  // namespace capsule::mcp
