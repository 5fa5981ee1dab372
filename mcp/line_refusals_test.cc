// Lines refused before they are read as a request (not JSON, or JSON over the limits) are
// answered to the request's id whenever a tolerant scan finds it, id null only when it cannot.
#include <gtest/gtest.h>

#include "mcp/json_rpc.h"

namespace capsule::mcp {
namespace {

// The reply's id and code for one line refused at the line level.
std::pair<Json, int> Refused(const std::string& line) {
  ReadLine read = ParseLine(line);
  EXPECT_TRUE(read.error_reply.has_value()) << line.substr(0, 200);
  if (!read.error_reply) return {nullptr, 0};
  return {(*read.error_reply)["id"], (*read.error_reply)["error"]["code"].get<int>()};
}

std::string Nested(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(LineRefusalsTest, TheIdIsFoundWhereverTheFaultIs) {
  // As the official SDK writes a request: the id last, after the params.
  const std::string surrogate = R"({"method":"tools/call","params":{"name":"history_append","arguments":)"
                                R"({"role":"user","content":"a \ud800 b"}},"jsonrpc":"2.0","id":41})";
  EXPECT_EQ(Refused(surrogate), std::make_pair(Json(41), kParseError));
  const std::string deep = R"({"jsonrpc":"2.0","id":"deep-1","method":"tools/call","params":{"x":)" + Nested(300) + "}}";
  EXPECT_EQ(Refused(deep), std::make_pair(Json("deep-1"), kParseError));
  const std::string big = R"({"jsonrpc":"2.0","method":"ping","params":{"n":123456789012345678901234567890},"id":7})";
  EXPECT_EQ(Refused(big), std::make_pair(Json(7), kParseError));
  // Strings that hold brackets, quotes and the word id do not mislead it.
  const std::string tricky = R"({"params":{"id":99,"s":"}\"id\":5 ]"},"jsonrpc":"2.0","id":8,"method":"x","v":01})";
  EXPECT_EQ(Refused(tricky).first, 8);
  // An id with a fault after it in the same line still answers.
  EXPECT_EQ(Refused(R"({"jsonrpc":"2.0","id":12,"method":"ping","params":{"a":tru})").first, 12);
}

TEST(LineRefusalsTest, IdNullOnlyWhenNoIdCanBeRead) {
  for (const std::string& line : {
           std::string(R"({"jsonrpc":"2.0","method":"ping","params":{"a":tru}})"),     // no id at all
           std::string(R"({"jsonrpc":"2.0","params":{"id":3,"x":tru},"method":"p"})"),  // an id, but not top-level
           std::string(R"({"jsonrpc":"2.0","params":{"x":tru} "id":3})"),              // unreadable before the id
           std::string(R"({"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"p"})"),  // id over 64 bits
           std::string(R"({"jsonrpc":"2.0","id":"\ud800","method":"p"})"),             // id with a lone surrogate
           std::string(R"({"jsonrpc":"2.0","id":{"a":1},"x":tru})"),                   // id neither string nor integer
           std::string("[") + Nested(300) + ",{\"id\":1}]",                             // not an object
           std::string(R"({"jsonrpc":"2.0","id":)"),
       }) {
    EXPECT_EQ(Refused(line).first, nullptr) << line.substr(0, 120);
  }
}

}  // namespace
}  // namespace capsule::mcp
