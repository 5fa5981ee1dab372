// capsule fleet drain through the real binaries on a real etcd cluster: three sidecars, four
// agents mounted on the first; the drain moves each to the live sidecar with the fewest
// agents, one at a time, reports each, and the registry and the folders agree afterwards.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "tests/cli_runner.h"
#include "tests/etcd_cluster.h"
#include "tests/mount_runner.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::MakeTempDir;
using testing::RunCapsule;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST(FleetDrain, MovesEveryAgentToTheFewestLoadedAndReportsEach) {
  const std::string tmp = MakeTempDir("fleet-drain"), pki = tmp + "/pki", seal = tmp + "/seal.key";
  ASSERT_TRUE(testing::MakeMoveKeys(pki, seal));
  testing::EtcdCluster cluster(tmp + "/etcd");
  ASSERT_TRUE(cluster.ok());
  auto start = [&](const std::string& name) {
    return std::make_unique<testing::Sidecar>(
        tmp + "/" + name, pki, seal,
        std::vector<std::string>{"--mount-to", tmp + "/" + name + "-mnt", "--fleet", cluster.url(), "--fleet-name",
                                 name},
        tmp + "/" + name + ".log");
  };
  auto a = start("a");
  auto b = start("b");
  auto c = start("c");
  const std::vector<std::string> agents = {"d1", "d2", "d3", "d4"};
  std::vector<std::unique_ptr<testing::Mount>> mounts;
  for (const std::string& agent : agents) {
    auto init = RunCapsule({"init", tmp + "/a/" + agent, "--id", agent, "--name", "Agent", "--fleet", cluster.url(),
                            "--sidecar", "a"});
    ASSERT_EQ(init.exit_code, 0) << init.err;
    ASSERT_TRUE(MakeDirectories(tmp + "/a-mnt/" + agent).ok());
    mounts.push_back(std::make_unique<testing::Mount>(tmp + "/a/" + agent, tmp + "/a-mnt/" + agent));
    ASSERT_TRUE(mounts.back()->up());
  }
  auto drain = RunCapsule({"fleet", "drain", "a", "--from", tmp + "/a-mnt", "--fleet", cluster.url(), "--cert",
                           pki + "/client.pem", "--key", pki + "/client.key", "--ca", pki + "/ca.pem"});
  ASSERT_EQ(drain.exit_code, 0) << drain.out << drain.err;
  // Fewest agents first, ties to the first name: b, c, b, c.
  EXPECT_EQ(drain.out,
            "d1\tb\tmoved at epoch 2\nd2\tc\tmoved at epoch 2\nd3\tb\tmoved at epoch 2\nd4\tc\tmoved at epoch 2\n"
            "drained a: 4 of 4 agent(s) moved\n");
  EXPECT_TRUE(Contains(drain.err, "capsule: drain a: 4/4 d4 to c")) << drain.err;
  auto ls = RunCapsule({"fleet", "ls", "--fleet", cluster.url()});
  EXPECT_EQ(ls.out, "agents: 4\n  d1\tb\tepoch 2\tactive\n  d2\tc\tepoch 2\tactive\n  d3\tb\tepoch 2\tactive\n"
                    "  d4\tc\tepoch 2\tactive\n");
  for (size_t i = 0; i < agents.size(); ++i) {
    const std::string holder = i % 2 == 0 ? "b" : "c";
    auto verify = RunCapsule({"verify", tmp + "/" + holder + "-mnt/" + agents[i]});
    EXPECT_EQ(verify.exit_code, 0) << agents[i] << ": " << verify.out << verify.err;
    testing::UnmountPath(tmp + "/" + holder + "-mnt/" + agents[i]);
  }
}

}  // namespace
}  // namespace capsule
