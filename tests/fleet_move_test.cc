// Moves in a fleet, end to end: a real three-member etcd cluster (tests/etcd_cluster.h), real
// `capsule serve` sidecars registered in it under leases, real capsulefs mounts. A move by the
// target's name; `capsule fleet where` naming the new holder; a sidecar that wakes from
// SIGSTOP after its agent was adopted elsewhere, whose stale epoch the registry refuses and
// whose mount turns read-only; adopt refused while the holder is live and accepted after
// `capsule fleet retire`; one etcd member lost changing nothing, two stopping moves with a
// clear error until they are back.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <string>
#include <vector>

#include "capsule/base/file_io.h"
#include "capsule/format/holder.h"
#include "tests/cli_runner.h"
#include "tests/etcd_cluster.h"
#include "tests/mount_runner.h"
#include "tests/poll.h"
#include "tests/sidecar_runner.h"

namespace capsule {
namespace {

using testing::EtcdCluster;
using testing::MakeTempDir;
using testing::Mount;
using testing::Put;
using testing::RunCapsule;
using testing::Sidecar;
using testing::WaitUntil;

bool Contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class FleetMoveTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tmp_ = MakeTempDir("fleet-move");
    pki_ = tmp_ + "/pki";
    seal_ = tmp_ + "/seal.key";
    ASSERT_TRUE(testing::MakeMoveKeys(pki_, seal_));
    cluster_ = std::make_unique<EtcdCluster>(tmp_ + "/etcd");
    ASSERT_TRUE(cluster_->ok());
  }

  // A sidecar named `name` in the fleet, its root at TMP/NAME, mounting at TMP/NAME-mnt.
  std::unique_ptr<Sidecar> Start(const std::string& name, int ttl) {
    return std::make_unique<Sidecar>(
        Root(name), pki_, seal_,
        std::vector<std::string>{"--mount-to", tmp_ + "/" + name + "-mnt", "--fleet", cluster_->url(),
                                 "--fleet-name", name, "--fleet-ttl", std::to_string(ttl)},
        Log(name));
  }
  std::string Root(const std::string& name) const { return tmp_ + "/" + name; }
  std::string Log(const std::string& name) const { return tmp_ + "/" + name + ".log"; }

  testing::RunResult Init(const std::string& dir, const std::string& agent, const std::string& sidecar) {
    return RunCapsule({"init", dir, "--id", agent, "--name", "Agent", "--fleet", cluster_->url(), "--sidecar", sidecar});
  }
  testing::RunResult Move(const std::string& source, const std::string& to) {
    return RunCapsule({"move", source, "--to", to, "--fleet", cluster_->url(), "--cert", pki_ + "/client.pem", "--key",
                       pki_ + "/client.key", "--ca", pki_ + "/ca.pem"});
  }
  testing::RunResult Fleet(std::vector<std::string> args) {
    args.insert(args.begin(), "fleet");
    args.push_back("--fleet");
    args.push_back(cluster_->url());
    return RunCapsule(args);
  }
  bool Listed(const std::string& sidecar) { return Contains(Fleet({"sidecars"}).out, "  " + sidecar + "\t"); }

  std::string tmp_, pki_, seal_;
  std::unique_ptr<EtcdCluster> cluster_;
};

TEST_F(FleetMoveTest, MoveByNameAndWhereNamesTheNewHolder) {
  auto a = Start("a", 10);
  auto b = Start("b", 10);
  ASSERT_EQ(Init(Root("a") + "/agent-1", "agent-1", "a").exit_code, 0);
  const std::string mnt = tmp_ + "/a-mnt/agent-1";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Mount mount(Root("a") + "/agent-1", mnt);
  ASSERT_TRUE(mount.up());
  ASSERT_EQ(Put(mnt + "/files/before.txt", "before\n"), 0);

  auto moved = Move(mnt, "b");
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_TRUE(Contains(moved.out, "moved agent agent-1 to b (" + b->address() + ") at epoch 2")) << moved.out;
  auto where = Fleet({"where", "agent-1"});
  ASSERT_EQ(where.exit_code, 0) << where.err;
  EXPECT_EQ(where.out, "agent-1: held by b at epoch 2 (active), live at " + b->address() + "\n");
  // The old mount is retired (read-only); the new one, which b mounted, takes writes.
  EXPECT_EQ(Put(mnt + "/files/after.txt", "after\n"), EROFS);
  EXPECT_EQ(Put(tmp_ + "/b-mnt/agent-1/files/after.txt", "after\n"), 0);
  auto status = RunCapsule({"sidecar", "status", "--root", Root("b")});
  EXPECT_TRUE(Contains(status.out, "fleet " + cluster_->url() + " as b, lease ")) << status.out;
  // A name the registry does not know is refused before anything moves.
  auto nowhere = Move(tmp_ + "/b-mnt/agent-1", "c");
  EXPECT_EQ(nowhere.exit_code, 1);
  EXPECT_TRUE(Contains(nowhere.err, "--to c: no live sidecar of that name in the fleet")) << nowhere.err;
  testing::UnmountPath(tmp_ + "/b-mnt/agent-1");
}

TEST_F(FleetMoveTest, AdoptRefusedWhileHolderLiveStaleEpochRefusedAfterWakeMountReadOnly) {
  auto a = Start("a", 3);
  auto b = Start("b", 3);
  const std::string dir = Root("a") + "/agent-2", copy = tmp_ + "/copy/agent-2";
  ASSERT_EQ(Init(dir, "agent-2", "a").exit_code, 0);
  ASSERT_TRUE(MakeDirectories(tmp_ + "/copy").ok());
  ASSERT_EQ(testing::Shell("cp -a " + dir + " " + copy), 0);
  const std::string mnt = tmp_ + "/a-mnt/agent-2";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Mount mount(dir, mnt);
  ASSERT_TRUE(mount.up());

  // While a holds it and its lease holds, a copy is not adopted into the fleet.
  auto refused = RunCapsule({"adopt", copy, "--fleet", cluster_->url(), "--sidecar", "b"});
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_TRUE(Contains(refused.err, "the record names a at epoch 1 (active), which is live (its lease holds): "
                                    "retire it first (capsule fleet retire agent-2)"))
      << refused.err;

  // a is stopped past its lease; the admin retires the original and adopts the copy.
  ASSERT_EQ(::kill(a->pid(), SIGSTOP), 0);
  ASSERT_TRUE(WaitUntil([&] { return !Listed("a"); }, 20));
  auto retired = Fleet({"retire", "agent-2"});
  ASSERT_EQ(retired.exit_code, 0) << retired.err;
  auto adopted = RunCapsule({"adopt", copy, "--fleet", cluster_->url(), "--sidecar", "b"});
  ASSERT_EQ(adopted.exit_code, 0) << adopted.err;
  EXPECT_TRUE(Contains(adopted.out, "at epoch 2")) << adopted.out;

  // The stale copy on a offers epoch 2: the registry refuses it and the move rolls back.
  auto stale = Move(mnt, "b");
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_TRUE(Contains(stale.err, "epoch 2 is stale: the record names b at epoch 2 (active)")) << stale.err;
  EXPECT_EQ(Fleet({"where", "agent-2"}).out.rfind("agent-2: held by b at epoch 2 (active)", 0), 0u);

  // a wakes: its lease is gone, so it retires what it holds and the mount turns read-only.
  ASSERT_EQ(::kill(a->pid(), SIGCONT), 0);
  ASSERT_TRUE(WaitUntil([&] { return Put(mnt + "/files/late.txt", "late\n") == EROFS; }, 15));
  Result<std::string> log = ReadFile(Log("a"));
  ASSERT_TRUE(log.ok());
  EXPECT_TRUE(Contains(*log, "lease lost: lease ")) << *log;
  EXPECT_TRUE(Contains(*log, "retired agent=agent-2 epoch=1: the lease was lost")) << *log;
  EXPECT_EQ(HolderRecord::Load(dir)->state, HolderState::kRetired);
}

TEST_F(FleetMoveTest, OneEtcdMemberLostChangesNothingTwoStopMovesUntilBack) {
  // A lease long enough that the sidecars keep their agents through the outage below.
  auto a = Start("a", 90);
  auto b = Start("b", 90);
  ASSERT_EQ(Init(Root("a") + "/agent-3", "agent-3", "a").exit_code, 0);
  const std::string mnt = tmp_ + "/a-mnt/agent-3";
  ASSERT_TRUE(MakeDirectories(mnt).ok());
  Mount mount(Root("a") + "/agent-3", mnt);
  ASSERT_TRUE(mount.up());

  cluster_->Stop(0);  // the first endpoint every client tries
  ASSERT_TRUE(WaitUntil([&] { return cluster_->HasQuorum(); }, 20));  // a leader, if m0 led
  auto one_down = Move(mnt, "b");
  ASSERT_EQ(one_down.exit_code, 0) << one_down.err;
  const std::string on_b = tmp_ + "/b-mnt/agent-3";

  cluster_->Stop(1);  // no quorum: no move, and the reason given
  auto two_down = Move(on_b, "a");
  EXPECT_EQ(two_down.exit_code, 1);
  EXPECT_TRUE(Contains(two_down.err, "etcd")) << two_down.err;
  EXPECT_TRUE(Contains(two_down.err, "no answer (") || Contains(two_down.err, "answered HTTP"))
      << two_down.err;
  EXPECT_EQ(Put(on_b + "/files/still.txt", "still b's\n"), 0) << "the agent stays where it was";

  cluster_->Start(0);
  cluster_->Start(1);
  ASSERT_TRUE(WaitUntil([&] { return cluster_->HasQuorum(); }, 20));
  auto back = Move(on_b, "a");
  ASSERT_EQ(back.exit_code, 0) << back.err;
  EXPECT_EQ(Fleet({"where", "agent-3"}).out.rfind("agent-3: held by a at epoch 3 (active)", 0), 0u);
  testing::UnmountPath(tmp_ + "/a-mnt/agent-3");
}

}  // namespace
}  // namespace capsule
