// The gossip node, the cluster agreeing: quiescence, divergence, the training replica without a
// mirror, snapshots cut and installed: over in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(GossipNode, ThreeNodesAgreeAtQuiescence) {
  Nodes c(3);
  c.Start();
  for (int i = 0; i < 3; ++i) c.Publish(i, 1, 50);
  for (const absl::Status& s : c.Quiesce()) EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.node(i)->service().ReplicaHash(), c.node(0)->service().ReplicaHash()) << i;
    EXPECT_TRUE(SameVersions(c.node(i)->service().Applied(), c.node(0)->service().Applied())) << i;
    EXPECT_EQ(c.node(i)->service().counters().updates_applied(), 100u) << i;
    EXPECT_EQ(SeqOf(c.node(i)->service().Applied(), {"n2", 1002}), 50u);
  }
}

// A join probe's answer (NodeService::ReplayOf): the initial weights' hash,
// and the bytes of a cut's messages when the log holds each from seq 1,
// below a limit; nothing once a snapshot replaced the initial weights.
TEST(GossipNode, AReplayIsOfferedOnlyWhenTheLogHoldsTheWholeCutInFewerBytes) {
  Nodes c(2);
  c.Start();
  c.Publish(0, 1, 5);
  for (const absl::Status& s : c.Quiesce()) ASSERT_TRUE(s.ok()) << s;
  const VersionMap cut = c.node(0)->service().Applied();
  ASSERT_EQ(SeqOf(cut, {"n0", 1000}), 5u);
  const NodeService::Replay whole = c.node(0)->service().ReplayOf(cut, uint64_t{1} << 40);
  EXPECT_EQ(whole.initial_sha256, codec::WeightHashOf(InitialWeights()));
  ASSERT_TRUE(whole.bytes.has_value());
  EXPECT_GT(*whole.bytes, 5u * 8);
  // Its peer holds the same messages in its log.
  EXPECT_EQ(c.node(1)->service().ReplayOf(cut, uint64_t{1} << 40).bytes, whole.bytes);
  // Not below the limit (the weights' bytes, in a probe), or not all held.
  EXPECT_FALSE(c.node(0)->service().ReplayOf(cut, *whole.bytes).bytes.has_value());
  VersionMap beyond = cut;
  beyond[{"n0", 1000}] = 6;
  EXPECT_FALSE(c.node(0)->service().ReplayOf(beyond, uint64_t{1} << 40).bytes.has_value());
  beyond = cut;
  beyond[{"n7", 1}] = 1;
  EXPECT_FALSE(c.node(0)->service().ReplayOf(beyond, uint64_t{1} << 40).bytes.has_value());
  // A replica that a snapshot replaced no longer rests on those weights.
  std::vector<int64_t> weights = InitialWeights();
  ASSERT_TRUE(
      c.node(1)
          ->InstallSnapshot(weights, {}, c.node(1)->service().weight_checksum().Of(weights), "test")
          .ok());
  const NodeService::Replay after = c.node(1)->service().ReplayOf(cut, uint64_t{1} << 40);
  EXPECT_EQ(after.initial_sha256, "");
  EXPECT_FALSE(after.bytes.has_value());
}

// Two replicas that applied the same messages but hold different weights (a
// bad GPU, memory corruption, a bug: here one quantum at one index of the
// initial replica) must never both report success.
TEST(GossipNode, DivergedReplicasAreReportedNotQuiescent) {
  Nodes c(2);
  std::vector<int64_t> off_by_one = InitialWeights();
  off_by_one[123] += 1;
  c.SetInitial(1, off_by_one);
  c.Start();
  c.Publish(0, 1, 10);
  c.Publish(1, 1, 10);
  const std::vector<absl::Status> results = c.Quiesce(seconds(5));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kDataLoss) << i << ": " << results[i];
    EXPECT_NE(results[i].message().find("replicas diverged"), std::string::npos) << results[i];
  }
  // The line names both nodes and both hashes.
  const std::string line(results[0].message());
  EXPECT_NE(line.find("n1 has weights " + c.node(1)->service().ReplicaHash()), std::string::npos)
      << line;
  EXPECT_NE(line.find("n0 has " + c.node(0)->service().ReplicaHash()), std::string::npos) << line;
}

// Nodes without a mirror settle with their training replicas' hash, taken
// by the training thread in WaitQuiescent: the cluster agrees, and the hash
// each announces is its training replica's.
TEST(GossipNode, NodesWithoutAMirrorAgreeWithTheirTrainingReplicasHash) {
  Nodes c(3, milliseconds(0), NoMirror);
  std::vector<TrainingReplica> replicas(3, TrainingReplica(InitialWeights()));
  c.Start();
  for (int i = 0; i < 3; ++i) replicas[i].Publish(c.node(i), c.options(i), 1, 30);
  for (const absl::Status& s : QuiesceWithTrainingReplicas(c, replicas, seconds(20))) {
    EXPECT_TRUE(s.ok()) << s;
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(replicas[i].Hash(), replicas[0].Hash()) << i;
    EXPECT_EQ(c.node(i)->service().ReplicaHash(), replicas[i].Hash()) << i;  // what it settled with
    EXPECT_EQ(c.node(i)->service().counters().updates_applied(), 60u) << i;
  }
}

// The training replica is what is compared: one that differs (its node's
// vector and ledger are right) is reported, never quiescent. With a mirror
// this went unseen: the mirrors agreed.
TEST(GossipNode, ADivergedTrainingReplicaIsReportedWithoutAMirror) {
  Nodes c(2, milliseconds(0), NoMirror);
  std::vector<int64_t> off_by_one = InitialWeights();
  off_by_one[123] += 1;
  std::vector<TrainingReplica> replicas = {TrainingReplica(InitialWeights()),
                                           TrainingReplica(off_by_one)};
  c.Start();
  replicas[0].Publish(c.node(0), c.options(0), 1, 10);
  replicas[1].Publish(c.node(1), c.options(1), 1, 10);
  const std::vector<absl::Status> results = QuiesceWithTrainingReplicas(c, replicas, seconds(5));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(results[i].code(), absl::StatusCode::kDataLoss) << i << ": " << results[i];
    EXPECT_NE(results[i].message().find("replicas diverged"), std::string::npos) << results[i];
  }
  EXPECT_NE(std::string(results[0].message()).find(replicas[1].Hash()), std::string::npos);
}

// A snapshot of a node without a mirror is cut from the training replica at
// its next step boundary: pending until then, then that replica's weights
// at the vector it was at; a later ask waits for a later cut.
TEST(GossipNode, ASnapshotWithoutAMirrorIsTheTrainingReplicaAtAStepBoundary) {
  Nodes c(2, milliseconds(0), NoMirror);
  std::vector<TrainingReplica> replicas(2, TrainingReplica(InitialWeights()));
  c.Start();
  replicas[0].Publish(c.node(0), c.options(0), 1, 5);
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 5; }));
  const auto asked = Clock::now();
  EXPECT_TRUE(c.node(1)->service().TakeSnapshot(/*with_weights=*/true, asked).pending);
  // Header-only answers need no cut.
  const NodeService::Snapshot header =
      c.node(1)->service().TakeSnapshot(/*with_weights=*/false, asked);
  EXPECT_FALSE(header.pending);
  EXPECT_EQ(SeqOf(header.applied, {"n0", 1000}), 5u);
  ASSERT_TRUE(replicas[1].Step(c.node(1)).ok());
  EXPECT_EQ(replicas[1].cuts_offered(), 1);
  const NodeService::Snapshot snap =
      c.node(1)->service().TakeSnapshot(/*with_weights=*/true, asked);
  ASSERT_FALSE(snap.pending);
  EXPECT_EQ(snap.weights, replicas[1].Weights());
  EXPECT_EQ(SeqOf(snap.applied, {"n0", 1000}), 5u);
  EXPECT_EQ(snap.checksum, c.node(1)->service().weight_checksum().Of(snap.weights));
  EXPECT_NE(snap.weights, InitialWeights());
  // The next step offers nothing more unless asked again.
  ASSERT_TRUE(replicas[1].Step(c.node(1)).ok());
  EXPECT_EQ(replicas[1].cuts_offered(), 1);
  EXPECT_TRUE(c.node(1)->service().TakeSnapshot(true, Clock::now() + milliseconds(1)).pending);
}

// A snapshot installed on a node without a mirror goes to the training
// thread as its weights, followed by the log's messages beyond its cut (our
// own): the training replica ends where it was, with the snapshot's vector.
TEST(GossipNode, ASnapshotInstalledWithoutAMirrorIsReplayedByTheTrainingThread) {
  Nodes c(1, milliseconds(0), NoMirror);
  TrainingReplica replica(InitialWeights());
  replica.Publish(c.node(0), c.options(0), 1, 3);
  ASSERT_TRUE(replica.Step(c.node(0)).ok());
  const std::vector<int64_t> before = replica.Weights();
  // The replica after seq 1 only, as a peer would serve it.
  TrainingReplica at_one(InitialWeights());
  {
    std::mt19937_64 rng(1 * 31 + c.options(0).incarnation);
    Message m = MakeMessage(c.options(0), 1, rng);
    codec::FixedPointReplica r = *codec::FixedPointReplica::Create(kParams, kFractionBits);
    ASSERT_TRUE(r.Load(InitialWeights()).ok());
    ASSERT_TRUE(codec::ApplyDecoded(m.decoded, &r).ok());
    Received load;
    load.replace_weights.emplace(r.quanta().begin(), r.quanta().end());
    ASSERT_TRUE(at_one.Drain(c.node(0), load).ok());
  }
  const std::vector<int64_t> snapshot = at_one.Weights();
  ASSERT_TRUE(c.node(0)
                  ->InstallSnapshot(snapshot, {{{"n0", 1000}, 1}},
                                    c.node(0)->service().weight_checksum().Of(snapshot), "peer")
                  .ok());
  Received got = c.node(0)->training().TakeReceived();
  ASSERT_TRUE(got.replace_weights.has_value());
  EXPECT_EQ(*got.replace_weights, snapshot);
  EXPECT_EQ(got.updates.size(), 2u);  // seqs 2 and 3, ours, from the log
  ASSERT_TRUE(replica.Drain(c.node(0), got).ok());
  EXPECT_EQ(replica.Weights(), before);
  EXPECT_EQ(SeqOf(c.node(0)->service().Applied(), {"n0", 1000}), 3u);
  EXPECT_EQ(got.checksum, c.node(0)->service().weight_checksum().Of(before));
}

// A worker that asked for a snapshot (its join probe, then the weights) is
// on its way in: nodes that finished training do not end without it while
// it keeps asking, else its shard is never trained and it finds nobody to
// connect to (reckonctl compare, onebit, 784-256-10: three workers ended
// and exited 0 while the fourth was still joining). One that asked and
// never came holds them up for one failure timeout only.
TEST(GossipNode, FinishedNodesWaitForAWorkerThatIsJoining) {
  // A failure timeout of 2 s: the first wait (0.5 s) is well inside it.
  ManualClock clock;
  Nodes c(
      2, milliseconds(0), [](int, NodeOptions& o) { o.failure_timeout = seconds(2); }, {}, &clock);
  c.Start();
  c.Publish(0, 1, 5);
  c.Publish(1, 1, 5);
  const auto asked = clock.Now();
  c.node(0)->service().NoteJoiner("late", 42);
  const std::vector<absl::Status> held = QuiesceOn(c, clock, milliseconds(500));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(held[i].code(), absl::StatusCode::kDeadlineExceeded) << i << ": " << held[i];
  }
  EXPECT_NE(held[0].message().find("late is joining"), std::string::npos) << held[0];
  v1::NodeStatus status;
  c.node(0)->service().FillStatus(&status);
  EXPECT_FALSE(status.quiescent());
  bool listed = false;
  for (const v1::MemberStatus& m : status.members()) {
    if (m.node_id() != "late") continue;
    listed = true;
    EXPECT_EQ(m.state(), "joining");
    EXPECT_EQ(m.incarnation(), 42u);
  }
  EXPECT_TRUE(listed) << status.DebugString();
  // It never connected: one failure timeout after its request they end.
  for (const absl::Status& s : QuiesceOn(c, clock, seconds(10))) EXPECT_TRUE(s.ok()) << s;
  EXPECT_GE(clock.Now() - asked, seconds(2));
  EXPECT_EQ(c.node(0)->service().ReplicaHash(), c.node(1)->service().ReplicaHash());
}

}  // namespace
}  // namespace reckon::server
