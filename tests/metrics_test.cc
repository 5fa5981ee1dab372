// `capsule serve --metrics`: the real sidecar scraped over HTTP before and after a move, a move
// refused at its offer and one refused at the handshake; each number moves as the events say.
// Every scrape is parsed by prometheus_client's text parser (tests/scrape_metrics.py).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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
using testing::RunProgram;
using testing::Sidecar;

// The endpoint's samples, as tests/scrape_metrics.py parsed them; a failed scrape or parse
// fails the test.
Json Scrape(const std::string& address) {
  // Debian's python3, where python3-prometheus-client is installed (another python3 may come
  // first on PATH).
  testing::RunResult scraped = RunProgram("/usr/bin/python3", {"tests/scrape_metrics.py", address});
  EXPECT_EQ(scraped.exit_code, 0) << scraped.err;
  Result<Json> samples = ParseJson(scraped.out, "scrape", Code::kCorruption);
  EXPECT_TRUE(samples.ok()) << scraped.out;
  return samples.ok() ? *samples : Json::object();
}

double Value(const Json& samples, const std::string& name) {
  return samples.contains(name) ? samples[name].get<double>() : -1;
}

class MetricsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("metrics");
    pki_ = root_ + "/pki";
    seal_ = root_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
  }
  testing::RunResult Move(const std::string& src, const std::string& to, const std::string& cert = "client") {
    return RunCapsule({"move", src, "--to", to, "--cert", pki_ + "/" + cert + ".pem", "--key",
                       pki_ + "/" + cert + ".key", "--ca", pki_ + "/ca.pem"});
  }
  std::string root_, pki_, seal_;
};

TEST_F(MetricsTest, EachNumberMovesWithAMoveARefusedOfferAndARefusedHandshake) {
  const std::string agent = "metered-" + std::to_string(::getpid());
  const std::string src = root_ + "/a/" + agent;
  ASSERT_EQ(RunCapsule({"init", src, "--id", agent, "--name", "Agent"}).exit_code, 0);
  const std::string log = root_ + "/sidecar.log";
  Sidecar sidecar(root_ + "/b", pki_, seal_, {"--metrics", "127.0.0.1:0"}, log);
  ASSERT_FALSE(sidecar.address().empty());
  ASSERT_EQ(sidecar.NextLine().rfind("seal key ", 0), 0u);
  const std::string line = sidecar.NextLine();
  ASSERT_EQ(line.rfind("metrics on 127.0.0.1:", 0), 0u) << line;
  const std::string metrics = line.substr(std::string("metrics on ").size());
  ASSERT_NE(metrics, sidecar.address());

  Json before = Scrape(metrics);
  EXPECT_EQ(before["#types"]["capsule_sidecar_copy_seconds"], "histogram") << before.dump();
  EXPECT_EQ(before["#types"]["capsule_sidecar_held_agents"], "gauge");
  EXPECT_EQ(Value(before, "capsule_sidecar_moves_started_total"), 0) << before.dump();
  EXPECT_EQ(Value(before, "capsule_sidecar_moves_finished_total"), 0);
  EXPECT_EQ(Value(before, "capsule_sidecar_held_agents"), 0);
  EXPECT_EQ(Value(before, "capsule_sidecar_copy_seconds_count"), 0);

  testing::RunResult moved = Move(src, sidecar.address());
  ASSERT_EQ(moved.exit_code, 0) << moved.err << *ReadFile(log);
  Json after = Scrape(metrics);
  EXPECT_EQ(Value(after, "capsule_sidecar_moves_started_total"), 1) << after.dump();
  EXPECT_EQ(Value(after, "capsule_sidecar_moves_finished_total"), 1);
  EXPECT_EQ(Value(after, "capsule_sidecar_moves_rolled_back_total"), 0);
  EXPECT_EQ(Value(after, "capsule_sidecar_moves_in_flight"), 0);
  EXPECT_EQ(Value(after, "capsule_sidecar_moves_stuck"), 0);
  EXPECT_EQ(Value(after, "capsule_sidecar_held_agents"), 1);
  EXPECT_EQ(Value(after, "capsule_sidecar_staging_bytes"), 0);
  EXPECT_EQ(Value(after, "capsule_sidecar_handshakes_in_progress"), 0);
  EXPECT_EQ(Value(after, "capsule_sidecar_copy_seconds_count"), 1);
  EXPECT_EQ(Value(after, "capsule_sidecar_copy_seconds_bucket{le=\"+Inf\"}"), 1);
  EXPECT_EQ(Value(after, "capsule_sidecar_frozen_seconds_count"), 1);
  EXPECT_GT(Value(after, "capsule_sidecar_frozen_seconds_sum"), 0);
  // The agent's files came over: at least the manifest and the journal's bytes.
  Result<std::string> manifest = ReadFile(root_ + "/b/" + agent + "/manifest.json");
  ASSERT_TRUE(manifest.ok());
  EXPECT_GT(Value(after, "capsule_sidecar_bytes_received_total"), static_cast<double>(manifest->size()));

  // A second copy of the agent at its old epoch: the target, which holds epoch 2, refuses the
  // offer. Nothing is started.
  const std::string stale = root_ + "/c/" + agent;
  ASSERT_EQ(RunCapsule({"init", stale, "--id", agent, "--name", "Agent"}).exit_code, 0);
  testing::RunResult refused = Move(stale, sidecar.address());
  ASSERT_NE(refused.exit_code, 0) << refused.out;
  Json refused_offer = Scrape(metrics);
  EXPECT_EQ(Value(refused_offer, "capsule_sidecar_refusals_total{call=\"offer\",reason=\"failed_precondition\"}"), 1)
      << refused_offer.dump() << "\n" << *ReadFile(log);
  EXPECT_EQ(Value(refused_offer, "capsule_sidecar_moves_started_total"), 1);
  EXPECT_EQ(Value(refused_offer, "capsule_sidecar_held_agents"), 1);

  // A source whose certificate no trusted CA signed: refused at the handshake, once for each
  // time the source dials; the counter and the log's lines agree.
  ASSERT_NE(Move(stale, sidecar.address(), "rogue").exit_code, 0);
  Json rogue = Scrape(metrics);
  const std::string said = *ReadFile(log);
  int refused_lines = 0;
  for (size_t at = said.find(" serve: refused handshake "); at != std::string::npos;
       at = said.find(" serve: refused handshake ", at + 1)) {
    ++refused_lines;
  }
  EXPECT_GE(refused_lines, 1) << said;
  EXPECT_EQ(Value(rogue, "capsule_sidecar_refusals_total{call=\"handshake\",reason=\"permission_denied\"}"),
            refused_lines)
      << rogue.dump() << "\n" << said;
  EXPECT_EQ(Value(rogue, "capsule_sidecar_refusals_total{call=\"offer\",reason=\"failed_precondition\"}"), 1);
  EXPECT_EQ(Value(rogue, "capsule_sidecar_moves_started_total"), 1);
  EXPECT_EQ(Value(rogue, "capsule_sidecar_handshakes_in_progress"), 0);
}

// A free port on loopback, as the kernel picks one.
int FreePort() {
  UniqueFd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return -1;
  }
  return ntohs(addr.sin_port);
}

TEST_F(MetricsTest, TheNumbersAreNeverServedOnTheTlsPort) {
  const std::string address = "127.0.0.1:" + std::to_string(FreePort());
  testing::RunResult refused =
      RunCapsule({"serve", "--root", root_ + "/b", "--listen", address, "--cert", pki_ + "/server.pem", "--key",
                  pki_ + "/server.key", "--ca", pki_ + "/ca.pem", "--seal-key", seal_, "--metrics", address});
  EXPECT_EQ(refused.exit_code, 1) << refused.out;
  EXPECT_NE(refused.err.find("--metrics " + address +
                             ": the port --listen serves TLS on; the numbers need a port of their own"),
            std::string::npos)
      << refused.err;
  EXPECT_FALSE(PathExists(root_ + "/b")) << "a sidecar that cannot start leaves no folder behind";
}

}  // namespace
}  // namespace capsule
