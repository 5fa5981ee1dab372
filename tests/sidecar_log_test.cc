// `capsule serve --log-format json`: one JSON object a line, each naming its event; and under
// systemd (JOURNAL_STREAM naming its standard error) each line prefixed with its priority for
// journald.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "capsule/base/canonical_json.h"
#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;
using testing::Sidecar;

class SidecarLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("sidecar-log");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    agent_ = "logged-" + std::to_string(::getpid());
    src_ = root_ + "/a/" + agent_;
    ASSERT_EQ(RunCapsule({"init", src_, "--id", agent_, "--name", "Agent"}).exit_code, 0);
  }
  void TearDown() override { ::unsetenv("JOURNAL_STREAM"); }
  // A move of the agent to `sidecar`, then one of another agent with a certificate of the rogue
  // CA (refused at the handshake).
  void MoveTwice(const Sidecar& sidecar) {
    testing::RunResult moved = RunCapsule({"move", src_, "--to", sidecar.address(), "--cert", pki_ + "/client.pem",
                                           "--key", pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
    ASSERT_EQ(moved.exit_code, 0) << moved.err;
    const std::string other = root_ + "/a/other-" + std::to_string(::getpid());
    ASSERT_EQ(RunCapsule({"init", other, "--id", "other-" + std::to_string(::getpid()), "--name", "Other"}).exit_code,
              0);
    ASSERT_NE(RunCapsule({"move", other, "--to", sidecar.address(), "--cert", pki_ + "/rogue.pem", "--key",
                          pki_ + "/rogue.key", "--ca", pki_ + "/ca.pem"})
                  .exit_code,
              0);
  }
  std::string root_, pki_, seal_, agent_, src_;
};

TEST_F(SidecarLogTest, JsonLinesParseAndNameTheirEvents) {
  const std::string log = root_ + "/sidecar.log";
  {
    Sidecar sidecar(root_ + "/b", pki_, seal_, {"--log-format", "json"}, log);
    ASSERT_FALSE(sidecar.address().empty());
    MoveTwice(sidecar);
  }
  Result<std::string> text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  std::istringstream lines(*text);
  std::string line;
  std::set<std::string> events;
  int count = 0;
  while (std::getline(lines, line)) {
    ++count;
    Result<Json> object = ParseJson(line, "log line", Code::kCorruption);
    ASSERT_TRUE(object.ok() && object->is_object()) << "not a JSON object: " << line;
    ASSERT_TRUE((*object)["event"].is_string()) << line;
    EXPECT_EQ((*object)["program"], "serve") << line;
    EXPECT_EQ((*object)["time"].get<std::string>().size(), std::string("2026-12-03T18:40:00Z").size()) << line;
    const std::string event = (*object)["event"];
    events.insert(event + " " + object->value("call", ""));
    if (event == "activated") {
      EXPECT_EQ((*object)["agent"], agent_) << line;
      EXPECT_EQ((*object)["epoch"], 2) << line;
    }
    if (event == "refused") {
      EXPECT_FALSE(object->value("why", "").empty()) << line;
    }
  }
  EXPECT_GE(count, 6) << *text;
  for (const char* expected : {"accepted offer", "copied copy", "switched switch", "activated activate",
                               "refused handshake", "stopped "}) {
    EXPECT_TRUE(events.count(expected)) << "no " << expected << " line in:\n" << *text;
  }
}

TEST_F(SidecarLogTest, UnderSystemdEachLineCarriesItsPriorityForJournald) {
  const std::string log = root_ + "/sidecar.log";
  ASSERT_TRUE(WriteFileAtomic(log, "").ok());
  struct stat st;
  ASSERT_EQ(::stat(log.c_str(), &st), 0);
  // What systemd sets when standard error is its stream to journald: that file's device and inode.
  ::setenv("JOURNAL_STREAM", (std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino)).c_str(), 1);
  {
    Sidecar sidecar(root_ + "/b", pki_, seal_, {}, log);
    ASSERT_FALSE(sidecar.address().empty());
    MoveTwice(sidecar);
  }
  Result<std::string> text = ReadFile(log);
  ASSERT_TRUE(text.ok());
  EXPECT_NE(text->find("<5>"), std::string::npos) << *text;
  std::istringstream lines(*text);
  std::string line;
  bool warned = false;
  while (std::getline(lines, line)) {
    if (line.find(" serve: ") == std::string::npos) continue;  // not an event's line
    const bool refused = line.find(" serve: refused ") != std::string::npos;
    EXPECT_EQ(line.substr(0, 3), refused ? "<4>" : "<5>") << line;
    warned = warned || refused;
  }
  EXPECT_TRUE(warned) << *text;

  // Standard error elsewhere than JOURNAL_STREAM names (a redirection): no prefix.
  const std::string other = root_ + "/other.log";
  {
    Sidecar sidecar(root_ + "/b", pki_, seal_, {}, other);
    ASSERT_FALSE(sidecar.address().empty());
  }
  Result<std::string> plain = ReadFile(other);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->find("<5>"), std::string::npos) << *plain;
  EXPECT_NE(plain->find(" serve: stopped "), std::string::npos) << *plain;
}

}  // namespace
}  // namespace capsule
