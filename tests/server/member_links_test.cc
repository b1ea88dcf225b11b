// server/member_links.h on its own: a member's stream and lanes, with fake
// links that record what they were given and what was done to them.
#include "server/member_links.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/lanes.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<const v1::GossipFrame> Heartbeat() {
  auto frame = std::make_shared<v1::GossipFrame>();
  frame->mutable_heartbeat()->set_training_done(true);
  return frame;
}

const LanePolicy kTwoLanes{2, 1000};
const Clock::time_point kT0{};

TEST(MemberLinks, LanesLiveOnlyWhileTheStreamDoesAndANewStreamStartsAfresh) {
  MemberLinks links;
  auto first = std::make_shared<RecordingLink>();
  auto out = std::make_shared<RecordingLink>(), in = std::make_shared<RecordingLink>();
  links.Attach(first, /*lanes_accepted=*/4, Clock::now());
  links.AddLane(1, out, kT0);
  links.LaneAnswered(1);
  links.AcceptLane(1, in, kT0);
  ASSERT_TRUE(links.Send(UpdateFrame({"a", 1}, 1, 10), SIZE_MAX, kTwoLanes, 0).has_value());
  links.CountReceived(0);
  EXPECT_EQ(links.state().frames_sent, 1u);
  EXPECT_EQ(links.lanes_up(), 1u);
  EXPECT_EQ(links.lanes_in(), 1u);
  EXPECT_EQ(links.All().size(), 3u);

  // A second stream replaces the first: it and both lanes are aborted, the
  // stream's counts start again.
  auto second = std::make_shared<RecordingLink>();
  links.Attach(second, 4, Clock::now());
  EXPECT_TRUE(first->aborted);
  EXPECT_TRUE(out->aborted);
  EXPECT_TRUE(in->aborted);
  EXPECT_FALSE(second->aborted);
  EXPECT_EQ(links.state().frames_sent, 0u);
  EXPECT_EQ(links.state().frames_received, 0u);
  EXPECT_EQ(links.lanes_up(), 0u);
  EXPECT_EQ(links.lanes_in(), 0u);
  EXPECT_EQ(links.stream(), second);

  // The stream closed by itself: not aborted again, its lanes are.
  auto lane = std::make_shared<RecordingLink>();
  links.AcceptLane(2, lane, kT0);
  links.StreamClosed();
  EXPECT_FALSE(second->aborted);
  EXPECT_TRUE(lane->aborted);
  EXPECT_FALSE(links.connected());
  EXPECT_FALSE(links.Send(Heartbeat(), SIZE_MAX, kTwoLanes, 0).has_value()) << "no stream";

  // Dropped: the stream is aborted too.
  auto third = std::make_shared<RecordingLink>();
  links.Attach(third, 4, Clock::now());
  links.Drop();
  EXPECT_TRUE(third->aborted);
  EXPECT_TRUE(links.All().empty());
}

TEST(MemberLinks, BigUpdatesTakeTheLeastQueuedLinkAndTheirFrontierCountsEveryLink) {
  MemberLinks links;
  auto stream = std::make_shared<RecordingLink>();
  links.Attach(stream, 3, Clock::now());
  const OriginKey a{"a", 1};
  // Small Updates and other frames stay on the stream; heartbeats go ahead.
  ASSERT_EQ(links.Send(UpdateFrame(a, 1, 10), SIZE_MAX, kTwoLanes, 0)->lane, 0u);
  ASSERT_TRUE(links.Send(Heartbeat(), SIZE_MAX, kTwoLanes, 0).has_value());
  EXPECT_EQ(stream->sent.size(), 1u);
  EXPECT_EQ(stream->urgent.size(), 1u);
  EXPECT_EQ(links.state().frames_sent, 1u) << "only Updates are counted";
  EXPECT_TRUE(links.LanesToDial(kT0, kT0, kTwoLanes).empty()) << "no big Update yet";

  // A big one asks for lanes: two (the policy's), though the member takes 3.
  std::optional<MemberLinks::Sent> big =
      links.SendUpdate(a, 2, UpdateFrame(a, 2, 2000), SIZE_MAX, kTwoLanes, 0);
  ASSERT_TRUE(big.has_value());
  EXPECT_GT(big->bytes, 2000u);
  EXPECT_EQ(big->lane, 0u) << "no lane is up yet";
  EXPECT_EQ(links.LanesToDial(kT0, kT0, kTwoLanes), (std::vector<uint32_t>{1, 2}));
  auto lane1 = std::make_shared<RecordingLink>(), lane2 = std::make_shared<RecordingLink>();
  links.AddLane(1, lane1, kT0);
  links.AddLane(2, lane2, kT0);
  EXPECT_TRUE(links.LanesToDial(kT0, kT0, kTwoLanes).empty()) << "both are open";
  links.LaneAnswered(1);  // lane 2 is not up: never picked
  stream->queued = 5000;
  lane2->queued = 0;
  big = links.SendUpdate(a, 3, UpdateFrame(a, 3, 2000), SIZE_MAX, kTwoLanes, 0);
  ASSERT_TRUE(big.has_value());
  EXPECT_EQ(big->lane, 1u);
  EXPECT_EQ(lane1->sent.size(), 1u);
  EXPECT_TRUE(lane2->sent.empty());
  EXPECT_EQ(links.state().pushed.at(a), 3u);
  EXPECT_EQ(links.state().pushed_frame.at(a), (std::vector<uint64_t>{2, 1, 0}));
  EXPECT_EQ(links.LeastQueued(), 0u);
  EXPECT_EQ(links.QueuedBytes(), 5000u);

  // A full queue takes nothing and records nothing.
  lane1->queued = 5000;
  EXPECT_FALSE(links.SendUpdate(a, 4, UpdateFrame(a, 4, 2000), 4000, kTwoLanes, 0).has_value());
  EXPECT_EQ(links.state().pushed.at(a), 3u);
}

TEST(MemberLinks, WhatTheMemberProcessedAndStillLacksIsPushedAgainNotWhatIsLate) {
  MemberLinks links;
  links.Attach(std::make_shared<RecordingLink>(), 1, Clock::now());
  auto lane = std::make_shared<RecordingLink>();
  const OriginKey a{"a", 1}, b{"b", 1};
  ASSERT_TRUE(links.SendUpdate(a, 1, UpdateFrame(a, 1, 10), SIZE_MAX, kTwoLanes, 0).has_value());
  links.AddLane(1, lane, kT0);
  links.LaneAnswered(1);
  ASSERT_TRUE(links.SendUpdate(b, 1, UpdateFrame(b, 1, 2000), SIZE_MAX, kTwoLanes, 1).has_value());
  ASSERT_EQ(lane->sent.size(), 1u) << "tie: turn 1 is the lane";
  EXPECT_EQ(links.state().pushed_frame.at(b), (std::vector<uint64_t>{1, 1}));

  google::protobuf::RepeatedField<uint64_t> lanes_received;
  lanes_received.Add(0);
  // It processed the stream's frame but not the lane's: a's message was
  // lost, b's may still be on its way.
  links.ForgetLost(VersionMap{}, 1, lanes_received);
  EXPECT_EQ(SeqOf(links.state().pushed, a), 0u);
  EXPECT_EQ(SeqOf(links.state().pushed, b), 1u);
  // Once it processed the lane's too, b's is lost as well.
  lanes_received.Set(0, 1);
  links.ForgetLost(VersionMap{}, 1, lanes_received);
  EXPECT_EQ(SeqOf(links.state().pushed, b), 0u);
  // What it applied is not pushed again.
  ASSERT_TRUE(links.SendUpdate(a, 1, UpdateFrame(a, 1, 10), SIZE_MAX, kTwoLanes, 0).has_value());
  links.ForgetLost(VersionMap{{a, 1}}, 99, lanes_received);
  EXPECT_EQ(SeqOf(links.state().pushed, a), 1u);
}

TEST(MemberLinks, AForgottenLaneOfOursLosesWhatItCarriedAndWaitsBeforeItIsDialedAgain) {
  MemberLinks links;
  links.Attach(std::make_shared<RecordingLink>(), 2, Clock::now());
  const OriginKey a{"a", 1};
  ASSERT_TRUE(links.SendUpdate(a, 1, UpdateFrame(a, 1, 2000), SIZE_MAX, kTwoLanes, 0).has_value());
  auto ours = std::make_shared<RecordingLink>(), theirs = std::make_shared<RecordingLink>();
  links.AddLane(1, ours, kT0);
  links.AcceptLane(1, theirs, kT0);
  links.CountReceived(1);
  links.CountReceived(1);
  EXPECT_EQ(links.LaneFramesReceived(), (std::vector<uint64_t>{2}));
  ASSERT_EQ(links.FindLane(ours.get())->ours, true);
  ASSERT_EQ(links.FindLane(theirs.get())->ours, false);
  EXPECT_FALSE(links.FindLane(links.stream().get()).has_value());

  // Theirs forgotten: nothing of ours changes.
  links.ForgetLane(*links.FindLane(theirs.get()), kT0 + milliseconds(1000));
  EXPECT_TRUE(theirs->aborted);
  EXPECT_TRUE(links.LaneFramesReceived().empty());
  EXPECT_EQ(SeqOf(links.state().pushed, a), 1u);
  // Ours forgotten: what was pushed is taken for lost, and lanes wait.
  links.ForgetLane(*links.FindLane(ours.get()), kT0 + milliseconds(1000));
  EXPECT_TRUE(ours->aborted);
  EXPECT_TRUE(links.state().pushed.empty());
  EXPECT_TRUE(links.LanesToDial(kT0 + milliseconds(999), kT0, kTwoLanes).empty());
  EXPECT_EQ(links.LanesToDial(kT0 + milliseconds(1000), kT0, kTwoLanes),
            (std::vector<uint32_t>{1, 2}));

  // A lane never answered is aborted once it was dialed before the deadline
  // given (its close, through the node, forgets it).
  auto silent = std::make_shared<RecordingLink>();
  links.AddLane(1, silent, kT0 + milliseconds(1000));
  links.LanesToDial(kT0 + milliseconds(2000), kT0 + milliseconds(1000), kTwoLanes);
  EXPECT_FALSE(silent->aborted);
  links.LanesToDial(kT0 + milliseconds(3000), kT0 + milliseconds(1001), kTwoLanes);
  EXPECT_TRUE(silent->aborted);
}

}  // namespace
}  // namespace reckon::server
