// Lanes: the gossip node's part, tested without sockets (server/lanes.h).
#include "server/lanes.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/anti_entropy.h"
#include "server/applied_state.h"
#include "server/checksum_ledger.h"
#include "server/dial_schedule.h"
#include "server/early_arrivals.h"
#include "server/held_bytes.h"
#include "server/inbox.h"
#include "server/joiners.h"
#include "server/member_table.h"
#include "server/membership.h"
#include "server/message_log.h"
#include "server/overlay.h"
#include "server/pending_handshakes.h"
#include "server/quiescence.h"
#include "server/snapshot_cuts.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(Lanes, ALaneIsTakenOnlyFromALiveMemberOfTheSameIncarnation) {
  MemberMap members;
  Member& b = members["b"];
  b.node_id = "b";
  b.incarnation = 5;
  MemberTestAccess::SetState(b, MemberState::kAlive);
  b.links.Attach(std::make_shared<NowhereLink>(), 0, Clock::now());
  v1::Hello lane = HelloFrom("b", 5);
  lane.set_lane(1);
  EXPECT_FALSE(LaneRefusal(lane, members).has_value());
  lane.set_lane(kMaxLanes);
  EXPECT_FALSE(LaneRefusal(lane, members).has_value());
  lane.set_lane(kMaxLanes + 1);
  std::optional<HelloVerdict> refused = LaneRefusal(lane, members);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason, "lane 17 is past the most a pair may have, 16");
  EXPECT_FALSE(refused->permanent);
  EXPECT_EQ(refused->counter, v1::NodeCounters::kPeersRefusedFieldNumber) << "no member dials it";
  lane.set_lane(2);
  lane.mutable_self()->set_incarnation(4);
  refused = LaneRefusal(lane, members);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason,
            "a lane of incarnation 4 of node 'b', whose stream with this node is of "
            "incarnation 5");
  EXPECT_EQ(refused->counter, v1::NodeCounters::kPeersRefusedForNowFieldNumber);
  lane.mutable_self()->set_incarnation(6);  // a restart's lane before its stream
  EXPECT_TRUE(LaneRefusal(lane, members).has_value());
  lane.mutable_self()->set_incarnation(5);
  lane.mutable_self()->set_node_id("c");
  refused = LaneRefusal(lane, members);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->reason, "a lane of node 'c', whose stream with this node is not up");
  EXPECT_EQ(refused->counter, v1::NodeCounters::kPeersRefusedForNowFieldNumber);
  lane.mutable_self()->set_node_id("b");
  MemberTestAccess::SetState(b, MemberState::kDead);
  EXPECT_EQ(LaneRefusal(lane, members)->reason,
            "a lane of node 'b', whose stream with this node is not up");
  MemberTestAccess::SetState(b, MemberState::kAlive);
  b.links.StreamClosed();
  EXPECT_TRUE(LaneRefusal(lane, members).has_value());
}

TEST(Lanes, BigUpdatesGoOnTheLeastQueuedLinkAndTiesGoRound) {
  const std::vector<std::optional<size_t>> idle = {0, 0, std::nullopt, 0};
  // Small Updates stay on the stream, whatever is queued there.
  EXPECT_EQ(PickLane(999, 1000, {5000, 0, 0, 0}, 1), 0u);
  // Ties go round the links that are up (lane 2 is not).
  std::vector<uint32_t> picked;
  for (uint64_t turn = 0; turn < 4; ++turn) picked.push_back(PickLane(1000, 1000, idle, turn));
  EXPECT_EQ(picked, (std::vector<uint32_t>{0, 1, 3, 3}));
  // Otherwise the fewest bytes queued.
  EXPECT_EQ(PickLane(1000, 1000, {700, 300, 100, 200}, 0), 2u);
  EXPECT_EQ(PickLane(1000, 1000, {700, 300, std::nullopt, 200}, 0), 3u);
  EXPECT_EQ(PickLane(1000, 1000, {0}, 7), 0u);  // no lanes
}

TEST(Lanes, LossIsEvidentOnlyOnceEveryLinkProcessedItsFrontier) {
  google::protobuf::RepeatedField<uint64_t> lanes;
  // Sent: 10 frames on the stream, 4 on lane 1, 7 on lane 2.
  const std::vector<uint64_t> frontier = {10, 4, 7};
  lanes.Add(4);
  lanes.Add(6);
  EXPECT_FALSE(ProcessedThrough(frontier, 10, lanes)) << "lane 2 still has one on its way";
  lanes.Set(1, 7);
  EXPECT_TRUE(ProcessedThrough(frontier, 10, lanes));
  EXPECT_FALSE(ProcessedThrough(frontier, 9, lanes));
  lanes.RemoveLast();  // the member counts no lane 2 (it has not seen it up)
  EXPECT_FALSE(ProcessedThrough(frontier, 10, lanes));
  EXPECT_TRUE(ProcessedThrough({10}, 10, {}));
  EXPECT_TRUE(ProcessedThrough({10, 0, 0}, 12, {})) << "lanes that carried nothing";
}

}  // namespace
}  // namespace reckon::server
