// The etcd client and the holder of record against a real three-member etcd cluster
// (tests/etcd_cluster.h): transactions that compare the record's revision, leases that expire,
// endpoints tried in turn, and what a lost quorum does (refuses, never guesses).
#include <gtest/gtest.h>

#include "capsule/base/temp_dir.h"
#include "move/fleet/etcd_client.h"
#include "move/fleet/registry.h"
#include "tests/etcd_cluster.h"
#include "tests/poll.h"

namespace capsule::fleet {
namespace {

using testing::EtcdCluster;

EtcdClient Client(const EtcdCluster& cluster) {
  Result<FleetOptions> options = ParseFleetUrl(cluster.url());
  EXPECT_TRUE(options.ok());
  options->timeout_ms = 3000;
  return EtcdClient(*options);
}

TEST(FleetUrl, RefusesWhatIsNotEtcdHostPort) {
  EXPECT_TRUE(ParseFleetUrl("etcd://127.0.0.1:2379,h2:1").ok());
  Result<FleetOptions> http = ParseFleetUrl("http://127.0.0.1:2379");
  ASSERT_FALSE(http.ok());
  EXPECT_NE(http.status().message().find("expected etcd://HOST:PORT"), std::string::npos) << http.status().message();
  Result<FleetOptions> port = ParseFleetUrl("etcd://127.0.0.1:2379,h2");
  ASSERT_FALSE(port.ok());
  EXPECT_NE(port.status().message().find("'h2' is not HOST:PORT"), std::string::npos) << port.status().message();
}

TEST(FleetRegistry, HolderChangesOnlyByItsRevisionAndEpoch) {
  EtcdCluster cluster(testing::MakeTempDir("fleet-client") + "/etcd");
  ASSERT_TRUE(cluster.ok());
  EtcdClient etcd = Client(cluster);
  ASSERT_TRUE(ClaimFresh(etcd, "a1", "left", 1).ok());
  Result<std::optional<HolderOfRecord>> record = ReadHolder(etcd, "a1");
  ASSERT_TRUE(record.ok() && record->has_value());
  EXPECT_EQ((*record)->sidecar, "left");
  EXPECT_EQ((*record)->epoch, 1u);

  // A move to "right" at epoch 2 claims it; a second claim at epoch 2 is stale.
  Result<Claim> claim = ClaimHolder(etcd, "a1", std::string(32, 'a'), "right", 2);
  ASSERT_TRUE(claim.ok()) << claim.status().message();
  Result<Claim> again = ClaimHolder(etcd, "a1", std::string(32, 'b'), "other", 2);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("epoch 2 is stale: the record names right at epoch 2 (active)"),
            std::string::npos)
      << again.status().message();

  // A move fenced by its source never lands, even at a newer epoch.
  const std::string fenced_move(32, 'c');
  Result<bool> landed = ResolveByRecord(etcd, "a1", fenced_move, "third", 3);
  ASSERT_TRUE(landed.ok());
  EXPECT_FALSE(*landed);
  Result<Claim> late = ClaimHolder(etcd, "a1", fenced_move, "third", 3);
  ASSERT_FALSE(late.ok());
  EXPECT_NE(late.status().message().find("fenced by its source"), std::string::npos) << late.status().message();
  // ... and a claim that landed is answered as landed.
  Result<bool> moved = ResolveByRecord(etcd, "a1", std::string(32, 'a'), "right", 2);
  ASSERT_TRUE(moved.ok());
  EXPECT_TRUE(*moved);

  // init/adopt by another sidecar: refused while "right" is live, accepted once it is not.
  Result<int64_t> lease = etcd.GrantLease(2);
  ASSERT_TRUE(lease.ok());
  ASSERT_TRUE(etcd.Put(std::string(kSidecarsPrefix) + "right", SidecarJson({"right", "127.0.0.1:1", {"a1"}, 2, 0}),
                       *lease)
                  .ok());
  Status adopt = ClaimFresh(etcd, "a1", "left", 3);
  ASSERT_FALSE(adopt.ok());
  EXPECT_NE(adopt.message().find("names right at epoch 2 (active), which is live"), std::string::npos)
      << adopt.message();
  ASSERT_TRUE(testing::WaitUntil([&] { return !ReadSidecar(etcd, "right")->has_value(); }, 10));
  EXPECT_TRUE(ClaimFresh(etcd, "a1", "left", 3).ok());
}

TEST(FleetRegistry, OneMemberDownChangesNothingTwoDownRefusesAndResumes) {
  EtcdCluster cluster(testing::MakeTempDir("fleet-client") + "/etcd");
  ASSERT_TRUE(cluster.ok());
  EtcdClient etcd = Client(cluster);
  ASSERT_TRUE(ClaimFresh(etcd, "q1", "left", 1).ok());

  cluster.Stop(0);  // the first endpoint tried: the client goes on to the next
  ASSERT_TRUE(testing::WaitUntil([&] { return cluster.HasQuorum(); }, 10));
  Result<Claim> one_down = ClaimHolder(etcd, "q1", std::string(32, 'a'), "right", 2);
  ASSERT_TRUE(one_down.ok()) << one_down.status().message();

  cluster.Stop(1);  // two of three: no quorum
  Result<Claim> two_down = ClaimHolder(etcd, "q1", std::string(32, 'b'), "left", 3);
  ASSERT_FALSE(two_down.ok());
  EXPECT_EQ(two_down.status().code(), Code::kUnavailable) << two_down.status().message();
  Result<std::optional<HolderOfRecord>> unread = ReadHolder(etcd, "q1");
  EXPECT_FALSE(unread.ok()) << "a read without a quorum must fail, not answer a stale copy";

  cluster.Start(0);
  cluster.Start(1);
  ASSERT_TRUE(testing::WaitUntil([&] { return cluster.HasQuorum(); }, 20));
  Result<std::optional<HolderOfRecord>> record = ReadHolder(etcd, "q1");
  ASSERT_TRUE(record.ok() && record->has_value()) << record.status().message();
  EXPECT_EQ((*record)->sidecar, "right");
  EXPECT_EQ((*record)->epoch, 2u);
  Result<Claim> resumed = ClaimHolder(etcd, "q1", std::string(32, 'c'), "left", 3);
  EXPECT_TRUE(resumed.ok()) << resumed.status().message();
}

}  // namespace
}  // namespace capsule::fleet
