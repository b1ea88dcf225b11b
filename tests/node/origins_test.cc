// The gossip node, origins and what they send: the origin cap, wraps, validation on any number of
// threads: over in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

// An empty Update is valid: a member (of a token cluster: with TLS only an
// origin can sign its Updates) can send one for any origin it invents, and
// each used to add an origin to the version vector of every node, relayed
// and announced in every heartbeat, without a bound. Past max_origins a new
// origin's Update is dropped and counted; known origins go on, and so does
// a member's own incarnation, new or not.
TEST(GossipNode, InventedOriginsStopAtTheCap) {
  Nodes c(1, milliseconds(0), [](int, NodeOptions& o) { o.max_origins = 16; });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer liar(node, "liar", 7, "inproc:liar");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200; ++i) {
    NodeOptions invented;
    invented.node_id = absl::StrCat("invented", i);
    invented.incarnation = 1;
    liar.SendUpdate(MakeMessage(invented, 1, rng, /*count=*/0).update);
  }
  NodeOptions honest;
  honest.node_id = "liar";
  honest.incarnation = 7;
  liar.SendUpdate(MakeMessage(honest, 1, rng).update);
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"liar", 7}) == 1;
  }));
  // 16 origins, and the member's own beyond the cap.
  EXPECT_EQ(node->service().Applied().size(), 17u);
  v1::NodeStatus status;
  node->service().FillStatus(&status, false);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u);
  EXPECT_EQ(node->service().counters().origins_refused(), status.counters().origins_refused());
}

// An origin that never reaches seq 1 holds memory too: its early arrivals.
// They count against the origin cap like applied origins (200,000 of them
// at seq 2 were all held before, none refused); the invented origin whose
// seq 1 then comes is still one origin, and a member's own incarnation
// still gets in past the cap, early or not.
TEST(GossipNode, OriginsThatNeverReachSeqOneCountAgainstTheCap) {
  Nodes c(1, milliseconds(0), [](int, NodeOptions& o) { o.max_origins = 16; });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer liar(node, "liar", 7, "inproc:liar");
  std::mt19937_64 rng(5);
  NodeOptions invented;
  invented.incarnation = 1;
  for (int i = 0; i < 200; ++i) {
    invented.node_id = absl::StrCat("invented", i);
    liar.SendUpdate(MakeMessage(invented, 2, rng, /*count=*/1).update);
  }
  v1::NodeStatus status;
  ASSERT_TRUE(Eventually([&] {
    status.Clear();
    node->service().FillStatus(&status, false);
    return status.early_held() + status.counters().origins_refused() == 200;
  })) << status.early_held()
      << " held, " << status.counters().origins_refused() << " refused";
  EXPECT_EQ(status.early_held(), 16u);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u);
  // Seq 1 of a held origin: applied, then its seq 2; still 16 origins.
  invented.node_id = "invented3";
  liar.SendUpdate(MakeMessage(invented, 1, rng, /*count=*/1).update);
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"invented3", 1}) == 2;
  }));
  invented.node_id = "invented999";
  liar.SendUpdate(MakeMessage(invented, 1, rng, /*count=*/1).update);
  NodeOptions honest;
  honest.node_id = "liar";
  honest.incarnation = 7;
  liar.SendUpdate(MakeMessage(honest, 2, rng).update);
  liar.SendUpdate(MakeMessage(honest, 1, rng).update);
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"liar", 7}) == 2;
  }));
  status.Clear();
  node->service().FillStatus(&status, false);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u + 1u);
  EXPECT_EQ(SeqOf(node->service().Applied(), OriginKey{"invented999", 1}), 0u);
  EXPECT_EQ(status.early_held(), 15u);
  EXPECT_EQ(node->service().Applied().size(), 2u);
}

TEST(GossipNode, OriginsRefusedPastTheCapAreNotResentAndEndIdenticalWhereTheyMovedNothing) {
  Nodes c(2, milliseconds(0), [](int, NodeOptions& o) { o.max_origins = 8; });
  // Each holds its own ghosts up to the cap and refuses the other's.
  ASSERT_NO_FATAL_FAILURE(StartAndShowEachNodeOtherOrigins(c, /*steps_each=*/0));
  const std::vector<absl::Status> results = c.Quiesce(seconds(20));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i];
  EXPECT_EQ(c.node(0)->service().ReplicaHash(), c.node(1)->service().ReplicaHash());
  EXPECT_FALSE(SameVersions(c.node(0)->service().Applied(), c.node(1)->service().Applied()));
  // Told, neither sends the other what it refuses any more.
  const uint64_t repairs = c.node(0)->service().counters().repairs_sent() +
                           c.node(1)->service().counters().repairs_sent();
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(c.node(0)->service().counters().repairs_sent() +
                c.node(1)->service().counters().repairs_sent(),
            repairs);
  v1::NodeStatus status;
  c.node(0)->service().FillStatus(&status, false);
  EXPECT_GT(status.counters().origins_diverged(), 0u);
}

TEST(GossipNode, OriginsRefusedPastTheCapThatMovedWeightsEndAsADivergenceAtOnce) {
  Nodes c(2, milliseconds(0), [](int, NodeOptions& o) { o.max_origins = 8; });
  ASSERT_NO_FATAL_FAILURE(StartAndShowEachNodeOtherOrigins(c, /*steps_each=*/5));
  const std::vector<absl::Status> results = c.Quiesce(seconds(20));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kDataLoss) << i << ": " << results[i];
    EXPECT_NE(results[i].message().find("replicas diverged"), std::string::npos) << results[i];
    EXPECT_NE(results[i].message().find("--max-origins"), std::string::npos) << results[i];
  }
}

// A message whose step carries a weight past int64 is applied modulo 2^64,
// as every replica and backend applies it: wrapping addition is
// associative and commutative, so replicas stay identical in any order.
// (Refused instead, its origin stalled at that node, re-sent for ever,
// and every later message of it waited behind it; refusal also depended on
// what arrived first.) Counted: weights_wrapped.
TEST(GossipNode, AMessageThatOverflowsAWeightWrapsAndItsOriginGoesOn) {
  Nodes c(1);
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer member(node, "big", 7, "inproc:big");
  const NodeOptions origin = OriginOf("big", 7);
  const codec::WeightChecksum checksum(Fingerprint().seed());
  // seq 1: +INT64_MAX on weight 1 (positive at first: it wraps).
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  const std::vector<uint32_t> words = {1};
  v1::Update huge;
  huge.mutable_origin()->set_node_id("big");
  huge.mutable_origin()->set_incarnation(7);
  huge.set_seq(1);
  ASSERT_TRUE(
      codec::EncodeThresholdUpdate(words, kHuge, kParams, v1::CODEC_THRESHOLD_RICE, &huge).ok());
  huge.set_checksum_delta(checksum.OfUpdate(kHuge, words));
  member.SendUpdate(huge);
  std::mt19937_64 rng(9);
  const Message next = MakeMessage(origin, 2, rng);
  member.SendUpdate(next.update);
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"big", 7}) == 2;
  })) << "the origin stalled at its overflowing message";
  std::vector<int64_t> expected = InitialWeights();
  ASSERT_GT(expected[1], 0);
  auto add = [](int64_t a, int64_t b) {
    return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  };
  expected[1] = add(expected[1], kHuge);
  for (const uint32_t w : next.decoded.words) {
    const uint32_t i = w & 0x7FFFFFFFu;
    expected[i] = add(expected[i], (w >> 31) ? -kStep : kStep);
  }
  EXPECT_EQ(node->service().ReplicaHash(), codec::WeightHashOf(expected));
  EXPECT_EQ(node->service().counters().weights_wrapped(), 1u);
  EXPECT_EQ(node->service().counters().decode_errors(), 0u);
}

TEST(GossipNode, AnyNumberOfValidationThreadsAcceptsAndRefusesTheSame) {
  const ReceiveOutcome alone = Receive(1);  // the node thread validates alone
  EXPECT_EQ(alone.accepted_seqs, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(alone.decode_errors, 3u);
  EXPECT_EQ(alone.updates_applied, 8u);
  EXPECT_EQ(Receive(2), alone);
  EXPECT_EQ(Receive(4), alone);
}

}  // namespace
}  // namespace reckon::server
