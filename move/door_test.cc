// The sidecar's door (move/door.h) on its own: which connection is admitted, which handshake
// loses its place to a newer one, and which connection is refused, by peer and in all.
#include "move/door.h"

#include <poll.h>

#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace capsule::move {
namespace {

DoorLimits Small() {
  DoorLimits limits;
  limits.max_connections = 6;
  limits.max_connections_per_peer = 3;
  limits.max_handshakes = 4;
  limits.max_handshakes_per_peer = 2;
  return limits;
}

bool Woken(const DoorPass& pass) {
  pollfd fd{pass.wake_fd(), POLLIN, 0};
  return ::poll(&fd, 1, 0) == 1;
}

std::unique_ptr<DoorPass> Admit(Door* door, const std::string& host) {
  Result<std::unique_ptr<DoorPass>> pass = door->Admit(host);
  EXPECT_TRUE(pass.ok()) << pass.status().ToString();
  return pass.ok() ? std::move(*pass) : nullptr;
}

TEST(DoorTest, APeersThirdHandshakeTakesThePlaceOfItsOldest) {
  Door door(Small());
  auto first = Admit(&door, "10.0.0.1");
  auto second = Admit(&door, "10.0.0.1");
  auto other = Admit(&door, "10.0.0.2");
  EXPECT_FALSE(Woken(*first));
  auto third = Admit(&door, "10.0.0.1");
  EXPECT_TRUE(Woken(*first)) << "the oldest of the peer's handshakes is given up";
  EXPECT_EQ(first->dropped_why(),
            "its place went to a newer connection: 2 handshakes from 10.0.0.1 are in progress "
            "(--max-handshakes-per-peer 2)");
  EXPECT_FALSE(Woken(*second));
  EXPECT_FALSE(Woken(*other)) << "another peer's handshake keeps its place";
  EXPECT_EQ(door.CountsFor("10.0.0.1").handshakes, 2);
}

TEST(DoorTest, AtTheLimitInAllThePeerWithTheMostHandshakesLosesOne) {
  Door door(Small());
  auto lone = Admit(&door, "10.0.0.9");  // the oldest of all, alone from its address
  auto a1 = Admit(&door, "10.0.0.1");
  auto a2 = Admit(&door, "10.0.0.1");
  auto b1 = Admit(&door, "10.0.0.2");
  ASSERT_EQ(door.CountsInAll().handshakes, 4);
  auto newcomer = Admit(&door, "10.0.0.3");
  EXPECT_FALSE(Woken(*lone)) << "a peer with one handshake in progress is not the one to give way";
  EXPECT_TRUE(Woken(*a1));
  EXPECT_FALSE(Woken(*a2));
  EXPECT_FALSE(Woken(*b1));
  EXPECT_NE(a1->dropped_why().find("4 handshakes are in progress in all (--max-handshakes 4)"), std::string::npos)
      << a1->dropped_why();
}

TEST(DoorTest, AuthenticatedConnectionsAreNeverDroppedAndFillThePeersShare) {
  Door door(Small());
  std::vector<std::unique_ptr<DoorPass>> in;
  for (int i = 0; i < 3; ++i) {
    in.push_back(Admit(&door, "10.0.0.1"));
    in.back()->Authenticated();
  }
  Result<std::unique_ptr<DoorPass>> fourth = door.Admit("10.0.0.1");
  ASSERT_FALSE(fourth.ok());
  EXPECT_EQ(fourth.status().code(), Code::kPermissionDenied);
  EXPECT_EQ(fourth.status().message(),
            "3 connections from 10.0.0.1 are open "
            "(--max-connections-per-peer 3), every one authenticated");
  for (const auto& pass : in) EXPECT_FALSE(Woken(*pass));
  // Another address still gets in; one closing frees a place for the first.
  EXPECT_NE(Admit(&door, "10.0.0.2"), nullptr);
  in.pop_back();
  EXPECT_NE(Admit(&door, "10.0.0.1"), nullptr);
}

TEST(DoorTest, TheLimitOnConnectionsInAllTakesAHandshakesPlaceThenRefuses) {
  Door door(Small());
  std::vector<std::unique_ptr<DoorPass>> in;
  for (const char* host : {"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}) {
    in.push_back(Admit(&door, host));
    in.back()->Authenticated();
  }
  auto handshaking = Admit(&door, "10.0.0.6");
  ASSERT_EQ(door.CountsInAll().connections, 6);
  auto newcomer = Admit(&door, "10.0.0.7");
  ASSERT_NE(newcomer, nullptr);
  EXPECT_TRUE(Woken(*handshaking));
  newcomer->Authenticated();
  Result<std::unique_ptr<DoorPass>> refused = door.Admit("10.0.0.8");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("6 connections are open in all (--max-connections 6), every one authenticated"),
            std::string::npos)
      << refused.status().message();
}

TEST(DoorTest, LimitsThatContradictEachOtherAreRefusedNamingTheFlag) {
  DoorLimits limits;
  EXPECT_TRUE(limits.Check().ok());
  limits.max_handshakes_per_peer = 0;
  EXPECT_EQ(limits.Check().message(), "--max-handshakes-per-peer: must be 1 or more, not 0");
  limits = DoorLimits{};
  limits.max_connections_per_peer = 100;
  EXPECT_EQ(limits.Check().message(), "--max-connections-per-peer 100: more than --max-connections 64 allows");
  limits = DoorLimits{};
  limits.max_handshakes = 65;
  EXPECT_EQ(limits.Check().message(), "--max-handshakes 65: more than --max-connections 64 allows");
}

}  // namespace
}  // namespace capsule::move
