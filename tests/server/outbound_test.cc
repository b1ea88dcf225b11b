// outbound.h: what goes out of the gossip node (server/outbound.h), tested over
// the node's core without a node thread or sockets: a fresh message goes to a
// member only as the next it lacks, and is recorded and counted; a full send
// queue drops it and counts the drop; our published messages go to every
// member in seq order, once; the Hello says who we are and what we accept.
#include "server/outbound.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "server/applied_state.h"
#include "server/lanes.h"
#include "server/node_core.h"
#include "tests/server/parts_test_util.h"

namespace reckon::server {
namespace {

using Counters = NodeCore::Counters;
using std::chrono::seconds;

std::shared_ptr<const v1::GossipFrame> UpdateOf(const OriginKey& origin, uint64_t seq) {
  auto frame = std::make_shared<v1::GossipFrame>();
  frame->mutable_update()->mutable_origin()->set_node_id(origin.node_id);
  frame->mutable_update()->mutable_origin()->set_incarnation(origin.incarnation);
  frame->mutable_update()->set_seq(seq);
  frame->mutable_update()->set_payload(std::string(100, 'x'));
  return frame;
}

NodeOptions Options(Clock::time_point now) {
  NodeOptions o;
  o.node_id = "me";
  o.incarnation = 7;
  o.listen_address = "me:1";
  o.cluster_token = "secret";
  o.fingerprint.set_param_count(4);
  o.clock = [now] { return now; };
  return o;
}

class OutboundTest : public ::testing::Test {
 protected:
  OutboundTest() : core_(Options(t0_), AppliedState(4, 0), /*clock_injected=*/true) {}

  // A member admitted on a stream of its own, alive, as the node makes one.
  Member& Connect(const std::string& id, const std::shared_ptr<RecordingLink>& stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(core_.mu) {
    core_.membership.AwaitHello(stream, t0_);
    Member& m = core_.membership.Admit(stream, HelloFrom(id, 1, id + ":1"), t0_);
    m.links.Attach(stream, 0, t0_);
    core_.membership.Connected(m, t0_);
    m.last_heard = t0_;
    return m;
  }
  uint64_t Count(int field) { return core_.counters.Get(field); }

  const Clock::time_point t0_ = Clock::time_point{} + seconds(100);
  NodeCore core_;
};

TEST_F(OutboundTest, AFreshMessageGoesToAMemberOnlyAsTheNextItLacksAndIsCounted) {
  absl::MutexLock l(&core_.mu);
  auto stream = std::make_shared<RecordingLink>();
  Member& b = Connect("b", stream);
  // Seq 2 before 1: anti-entropy serves a member that is behind, not a push.
  outbound::PushTo(core_, b, kA, 2, UpdateOf(kA, 2));
  EXPECT_TRUE(stream->sent.empty());
  outbound::PushTo(core_, b, kA, 1, UpdateOf(kA, 1));
  outbound::PushTo(core_, b, kA, 2, UpdateOf(kA, 2));
  ASSERT_EQ(stream->sent.size(), 2u);
  EXPECT_EQ(stream->sent[0]->update().seq(), 1u);
  EXPECT_EQ(stream->sent[1]->update().seq(), 2u);
  EXPECT_EQ(b.ever_sent[kA], 2u);
  EXPECT_EQ(SeqOf(b.links.state().pushed, kA), 2u);
  EXPECT_EQ(Count(Counters::kUpdateFramesSentFieldNumber), 2u);
  EXPECT_EQ(Count(Counters::kBytesSentFieldNumber),
            stream->sent[0]->ByteSizeLong() + stream->sent[1]->ByteSizeLong());
  // A member that already applied it is not sent it again.
  b.applied[kB] = 1;
  outbound::PushTo(core_, b, kB, 1, UpdateOf(kB, 1));
  EXPECT_EQ(stream->sent.size(), 2u);
  EXPECT_EQ(Count(Counters::kQueueDropsFieldNumber), 0u);
}

TEST_F(OutboundTest, AFullSendQueueDropsTheFreshMessageAndCountsTheDrop) {
  absl::MutexLock l(&core_.mu);
  auto stream = std::make_shared<RecordingLink>();
  Member& b = Connect("b", stream);
  stream->queued = core_.options.send_queue_byte_cap;
  outbound::PushTo(core_, b, kA, 1, UpdateOf(kA, 1));
  EXPECT_TRUE(stream->sent.empty());
  EXPECT_EQ(Count(Counters::kQueueDropsFieldNumber), 1u);
  EXPECT_EQ(Count(Counters::kUpdateFramesSentFieldNumber), 0u);
  EXPECT_EQ(b.ever_sent.count(kA), 0u);  // nothing recorded: it goes again later
  stream->queued = 0;
  outbound::PushTo(core_, b, kA, 1, UpdateOf(kA, 1));
  EXPECT_EQ(stream->sent.size(), 1u);
}

TEST_F(OutboundTest, OurPublishedMessagesGoToEveryMemberInSeqOrderOnce) {
  absl::MutexLock l(&core_.mu);
  auto to_b = std::make_shared<RecordingLink>(), to_c = std::make_shared<RecordingLink>();
  Connect("b", to_b);
  Connect("c", to_c);
  core_.to_push = {UpdateOf(core_.self, 1), UpdateOf(core_.self, 2), UpdateOf(core_.self, 3)};
  outbound::PushPublished(core_);
  outbound::PushPublished(core_);  // nothing left: nothing twice
  EXPECT_TRUE(core_.to_push.empty());
  for (const auto& stream : {to_b, to_c}) {
    ASSERT_EQ(stream->sent.size(), 3u);
    for (uint64_t i = 0; i < 3; ++i) {
      EXPECT_EQ(stream->sent[i]->update().seq(), i + 1);
      EXPECT_EQ(stream->sent[i]->update().origin().node_id(), "me");
    }
  }
}

TEST_F(OutboundTest, TheHelloSaysWhoWeAreAndWhatAStreamOrALaneAccepts) {
  const auto stream_hello = outbound::MakeHello(core_);
  const v1::Hello& h = stream_hello->hello();
  EXPECT_EQ(h.self().node_id(), "me");
  EXPECT_EQ(h.self().incarnation(), 7u);
  EXPECT_EQ(h.listen_address(), "me:1");
  EXPECT_EQ(h.cluster_token(), "secret");
  EXPECT_EQ(h.fingerprint().param_count(), 4u);
  EXPECT_EQ(h.lanes_accepted(), kMaxLanes);
  EXPECT_EQ(h.lane(), 0u);
  const auto lane_hello = outbound::MakeHello(core_, 3);
  EXPECT_EQ(lane_hello->hello().lane(), 3u);
  EXPECT_EQ(lane_hello->hello().lanes_accepted(), 0u);
}

}  // namespace
}  // namespace reckon::server
