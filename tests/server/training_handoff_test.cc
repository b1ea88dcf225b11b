// TrainingHandoff (server/training_handoff.h), socket-free: what the node
// hands the training thread is taken once, a snapshot's weights replace
// what they include, a passed check is announced once, and the first
// reason for a re-join wins.
#include "server/training_handoff.h"

#include <gtest/gtest.h>

#include <memory>

namespace reckon::server {
namespace {

std::shared_ptr<const codec::DecodedUpdate> Message(const std::string& origin, uint64_t seq) {
  auto u = std::make_shared<codec::DecodedUpdate>();
  u->node_id = origin;
  u->incarnation = 1;
  u->seq = seq;
  u->words = {7, 0x80000000u | 9};
  return u;
}

TEST(TrainingHandoff, WhatWasQueuedIsTakenOnceInOrderWithTheReplicasChecksumAndCut) {
  TrainingHandoff handoff;
  EXPECT_FALSE(handoff.pending());
  const auto t0 = std::chrono::steady_clock::now();
  handoff.Queue(Message("a", 1), t0);
  handoff.Queue(Message("b", 1), t0 + std::chrono::milliseconds(1));
  handoff.Queue(Message("a", 2), t0 + std::chrono::milliseconds(2));
  EXPECT_TRUE(handoff.pending());
  VersionMap cut;
  cut[OriginKey{"a", 1}] = 2;
  cut[OriginKey{"b", 1}] = 1;
  Received got = handoff.Take(0xC0FFEE, cut);
  ASSERT_EQ(got.updates.size(), 3u);
  EXPECT_EQ(got.updates[0]->node_id, "a");
  EXPECT_EQ(got.updates[1]->node_id, "b");
  EXPECT_EQ(got.updates[2]->seq, 2u);
  ASSERT_EQ(got.accepted_at.size(), 3u);
  EXPECT_EQ(got.accepted_at[2], t0 + std::chrono::milliseconds(2));
  EXPECT_EQ(got.checksum, 0xC0FFEEu);
  ASSERT_TRUE(got.cut.has_value());
  EXPECT_EQ(*got.cut, cut);
  EXPECT_FALSE(got.replace_weights.has_value());
  // Taken once: the next take is empty, with the replica's checksum as of then.
  EXPECT_FALSE(handoff.pending());
  Received again = handoff.Take(0xBEEF);
  EXPECT_TRUE(again.updates.empty());
  EXPECT_TRUE(again.accepted_at.empty());
  EXPECT_EQ(again.checksum, 0xBEEFu);
  EXPECT_FALSE(again.cut.has_value());
}

TEST(TrainingHandoff, ASnapshotsWeightsReplaceWhatWasQueuedAndMessagesAfterFollowThem) {
  TrainingHandoff handoff;
  const auto t = std::chrono::steady_clock::now();
  handoff.Queue(Message("a", 1), t);
  handoff.ReplaceWeights({5, -6, 7});
  EXPECT_TRUE(handoff.pending());
  handoff.Queue(Message("a", 2), t);  // accepted after the install
  Received got = handoff.Take(1);
  ASSERT_TRUE(got.replace_weights.has_value());
  EXPECT_EQ(*got.replace_weights, (std::vector<int64_t>{5, -6, 7}));
  ASSERT_EQ(got.updates.size(), 1u);
  EXPECT_EQ(got.updates[0]->seq, 2u);
  EXPECT_FALSE(handoff.Take(1).replace_weights.has_value());
}

TEST(TrainingHandoff, APassedCheckIsAnnouncedOnceAndAFailedOneNever) {
  TrainingHandoff handoff;
  VersionMap at;
  at[OriginKey{"a", 1}] = 4;
  handoff.RecordCheck(at, 42, /*passed=*/false, 1.5);
  EXPECT_EQ(handoff.last_check_ms(), 1.5);
  EXPECT_FALSE(handoff.TakeCheckToAnnounce().has_value());
  handoff.RecordCheck(at, 43, /*passed=*/true, 2.5);
  EXPECT_EQ(handoff.last_check_ms(), 2.5);
  std::optional<Member::Check> check = handoff.TakeCheckToAnnounce();
  ASSERT_TRUE(check.has_value());
  EXPECT_EQ(check->checksum, 43u);
  EXPECT_EQ(check->at, at);
  EXPECT_FALSE(handoff.TakeCheckToAnnounce().has_value());
}

TEST(TrainingHandoff, TheFirstReasonForAReJoinWinsUntilASwitchOrTheInstall) {
  TrainingHandoff handoff;
  EXPECT_FALSE(handoff.rejoin_source().has_value());
  handoff.AskRejoin("10.0.0.1:7000");
  handoff.AskRejoin("10.0.0.2:7000");
  EXPECT_EQ(handoff.rejoin_source(), "10.0.0.1:7000");
  handoff.SwitchRejoin("10.0.0.3:7000");
  EXPECT_EQ(handoff.rejoin_source(), "10.0.0.3:7000");
  handoff.RejoinDone();
  EXPECT_FALSE(handoff.rejoin_source().has_value());
  handoff.AskRejoin("10.0.0.2:7000");
  EXPECT_EQ(handoff.rejoin_source(), "10.0.0.2:7000");
}

TEST(TrainingHandoff, StepsAndDoneAreWhatTheTrainingThreadLastSaid) {
  TrainingHandoff handoff;
  EXPECT_FALSE(handoff.done());
  handoff.SetLocalSteps(10);
  EXPECT_EQ(handoff.local_steps(), 10u);
  handoff.SetDone(12);
  EXPECT_TRUE(handoff.done());
  EXPECT_EQ(handoff.local_steps(), 12u);
}

// Where the node keeps no mirror: a wanted cut is said by every Take until
// one is offered; a cut serves what was asked before it was made, and is let
// go; a hash is the training replica's at exactly the vector it was taken at.
TEST(TrainingHandoff, ACutIsWantedUntilOfferedAndServesWhatWasAskedBeforeIt) {
  using std::chrono::milliseconds;
  TrainingHandoff handoff;
  EXPECT_FALSE(handoff.Take(1).weights_wanted);
  const auto asked = std::chrono::steady_clock::now();
  EXPECT_EQ(handoff.CutSince(asked), nullptr);
  handoff.WantWeights();
  EXPECT_TRUE(handoff.Take(1).weights_wanted);
  EXPECT_TRUE(handoff.Take(1).weights_wanted);  // until offered
  VersionMap at;
  at[OriginKey{"a", 1}] = 3;
  handoff.OfferWeights(std::make_shared<TrainingCut>(TrainingCut{at, 42, {1, 2}, asked}));
  EXPECT_FALSE(handoff.Take(1).weights_wanted);
  ASSERT_NE(handoff.CutSince(asked), nullptr);
  EXPECT_EQ(handoff.CutSince(asked)->weights, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(handoff.CutSince(asked + milliseconds(1)), nullptr);  // asked after it was made
  handoff.DropCut(asked);                                         // not older than that: kept
  EXPECT_NE(handoff.CutSince(asked), nullptr);
  handoff.DropCut(asked + milliseconds(1));
  EXPECT_EQ(handoff.CutSince(asked), nullptr);

  EXPECT_FALSE(handoff.hash_wanted());
  handoff.WantHash();
  EXPECT_TRUE(handoff.hash_wanted());
  handoff.RecordHash(at, "abc");
  EXPECT_FALSE(handoff.hash_wanted());
  EXPECT_EQ(handoff.HashAt(at), "abc");
  VersionMap later = at;
  later[OriginKey{"a", 1}] = 4;
  EXPECT_EQ(handoff.HashAt(later), std::nullopt);
}

}  // namespace
}  // namespace reckon::server
