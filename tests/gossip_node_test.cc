// The gossip node's protocol logic over in-process links (server/inproc_link.h):
// real GossipNodes, real frames, no sockets or processes. Each test's
// timeouts are a few heartbeats. Tests about protocol time run the nodes and
// the network's latencies on a ManualClock and step it (StepUntil), a
// millisecond of real time a step; those left on the steady clock measure
// real time (backpressure), real slowness (a node slow to apply) or real
// reordering (the fault injector), and wait with generous deadlines.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "server/fault_link.h"
#include "server/inproc_link.h"
#include "server/node.h"
#include "server/node_metrics.h"
#include "server/tls.h"
#include "tests/inproc_cluster.h"
#include "tests/scripted_peer.h"

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
    EXPECT_EQ(c.node(i)->MirrorHash(), c.node(0)->MirrorHash()) << i;
    EXPECT_TRUE(SameVersions(c.node(i)->Applied(), c.node(0)->Applied())) << i;
    EXPECT_EQ(c.node(i)->counters().updates_applied(), 100u) << i;
    EXPECT_EQ(SeqOf(c.node(i)->Applied(), {"n2", 1002}), 50u);
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
  const VersionMap cut = c.node(0)->Applied();
  ASSERT_EQ(SeqOf(cut, {"n0", 1000}), 5u);
  const NodeService::Replay whole = c.node(0)->ReplayOf(cut, uint64_t{1} << 40);
  EXPECT_EQ(whole.initial_sha256, codec::WeightHashOf(InitialWeights()));
  ASSERT_TRUE(whole.bytes.has_value());
  EXPECT_GT(*whole.bytes, 5u * 8);
  // Its peer holds the same messages in its log.
  EXPECT_EQ(c.node(1)->ReplayOf(cut, uint64_t{1} << 40).bytes, whole.bytes);
  // Not below the limit (the weights' bytes, in a probe), or not all held.
  EXPECT_FALSE(c.node(0)->ReplayOf(cut, *whole.bytes).bytes.has_value());
  VersionMap beyond = cut;
  beyond[{"n0", 1000}] = 6;
  EXPECT_FALSE(c.node(0)->ReplayOf(beyond, uint64_t{1} << 40).bytes.has_value());
  beyond = cut;
  beyond[{"n7", 1}] = 1;
  EXPECT_FALSE(c.node(0)->ReplayOf(beyond, uint64_t{1} << 40).bytes.has_value());
  // A replica that a snapshot replaced no longer rests on those weights.
  std::vector<int64_t> weights = InitialWeights();
  ASSERT_TRUE(c.node(1)
                  ->InstallSnapshot(weights, {}, c.node(1)->weight_checksum().Of(weights), "test")
                  .ok());
  const NodeService::Replay after = c.node(1)->ReplayOf(cut, uint64_t{1} << 40);
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
  EXPECT_NE(line.find("n1 has weights " + c.node(1)->MirrorHash()), std::string::npos) << line;
  EXPECT_NE(line.find("n0 has " + c.node(0)->MirrorHash()), std::string::npos) << line;
}

// A worker's training replica in front of a node that keeps no mirror
// (NodeOptions::Replica::kTrainingThread), as worker/gossip_peers.cc keeps
// it: its own messages applied before they are published, the node's
// applied as taken, a cut offered whenever the node wants one.
class TrainingReplica {
 public:
  explicit TrainingReplica(const std::vector<int64_t>& initial)
      : replica_(*codec::FixedPointReplica::Create(kParams, kFractionBits)) {
    EXPECT_TRUE(replica_.Load(initial).ok());
  }
  absl::Status Drain(GossipNode* node, Received& got) {
    if (got.replace_weights) RECKON_RETURN_IF_ERROR(replica_.Load(*got.replace_weights));
    for (const auto& u : got.updates) RECKON_RETURN_IF_ERROR(codec::ApplyDecoded(*u, &replica_));
    if (got.weights_wanted) {
      node->OfferTrainingCut(*got.cut, got.checksum, Weights());
      ++cuts_offered_;
    }
    return absl::OkStatus();
  }
  // One step boundary: what arrived is taken and applied.
  absl::Status Step(GossipNode* node) {
    Received got = node->TakeReceived();
    return Drain(node, got);
  }
  void Publish(GossipNode* node, const NodeOptions& o, uint64_t first, int count) {
    std::mt19937_64 rng(first * 31 + o.incarnation);
    for (int k = 0; k < count; ++k) {
      Message m = MakeMessage(o, first + k, rng);
      ASSERT_TRUE(codec::ApplyDecoded(m.decoded, &replica_).ok());
      ASSERT_TRUE(node->Publish(m.update, m.decoded).ok());
    }
  }
  absl::Status Quiesce(GossipNode* node, milliseconds timeout) {
    node->SetTrainingDone(0);
    return node->WaitQuiescent(
        Clock::now() + timeout, [&](Received& r) { return Drain(node, r); },
        [&]() -> absl::StatusOr<std::string> { return replica_.WeightHash(); });
  }
  std::vector<int64_t> Weights() const {
    return std::vector<int64_t>(replica_.quanta().begin(), replica_.quanta().end());
  }
  std::string Hash() const { return replica_.WeightHash(); }
  int cuts_offered() const { return cuts_offered_; }

 private:
  codec::FixedPointReplica replica_;
  int cuts_offered_ = 0;
};

void NoMirror(int, NodeOptions& o) { o.replica = NodeOptions::Replica::kTrainingThread; }

std::vector<absl::Status> QuiesceWithTrainingReplicas(Nodes& c,
                                                      std::vector<TrainingReplica>& replicas,
                                                      milliseconds timeout) {
  std::vector<absl::Status> results(c.size());
  std::vector<std::thread> threads;
  for (int i = 0; i < c.size(); ++i) {
    threads.emplace_back([&, i] { results[i] = replicas[i].Quiesce(c.node(i), timeout); });
  }
  for (auto& t : threads) t.join();
  return results;
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
    EXPECT_EQ(c.node(i)->MirrorHash(), replicas[i].Hash()) << i;  // what it settled with
    EXPECT_EQ(c.node(i)->counters().updates_applied(), 60u) << i;
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
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 5; }));
  const auto asked = Clock::now();
  EXPECT_TRUE(c.node(1)->TakeSnapshot(/*with_weights=*/true, asked).pending);
  // Header-only answers need no cut.
  const GossipNode::Snapshot header = c.node(1)->TakeSnapshot(/*with_weights=*/false, asked);
  EXPECT_FALSE(header.pending);
  EXPECT_EQ(SeqOf(header.applied, {"n0", 1000}), 5u);
  ASSERT_TRUE(replicas[1].Step(c.node(1)).ok());
  EXPECT_EQ(replicas[1].cuts_offered(), 1);
  const GossipNode::Snapshot snap = c.node(1)->TakeSnapshot(/*with_weights=*/true, asked);
  ASSERT_FALSE(snap.pending);
  EXPECT_EQ(snap.weights, replicas[1].Weights());
  EXPECT_EQ(SeqOf(snap.applied, {"n0", 1000}), 5u);
  EXPECT_EQ(snap.checksum, c.node(1)->weight_checksum().Of(snap.weights));
  EXPECT_NE(snap.weights, InitialWeights());
  // The next step offers nothing more unless asked again.
  ASSERT_TRUE(replicas[1].Step(c.node(1)).ok());
  EXPECT_EQ(replicas[1].cuts_offered(), 1);
  EXPECT_TRUE(c.node(1)->TakeSnapshot(true, Clock::now() + milliseconds(1)).pending);
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
                                    c.node(0)->weight_checksum().Of(snapshot), "peer")
                  .ok());
  Received got = c.node(0)->TakeReceived();
  ASSERT_TRUE(got.replace_weights.has_value());
  EXPECT_EQ(*got.replace_weights, snapshot);
  EXPECT_EQ(got.updates.size(), 2u);  // seqs 2 and 3, ours, from the log
  ASSERT_TRUE(replica.Drain(c.node(0), got).ok());
  EXPECT_EQ(replica.Weights(), before);
  EXPECT_EQ(SeqOf(c.node(0)->Applied(), {"n0", 1000}), 3u);
  EXPECT_EQ(got.checksum, c.node(0)->weight_checksum().Of(before));
}

// A member that gives no address could be reached by one node only and stay
// invisible to the others' quiescence: it is refused, for good.
TEST(GossipNode, HelloWithoutListenAddressIsRefused) {
  Nodes c(2, milliseconds(0), [](int i, NodeOptions& o) {
    if (i == 1) o.listen_address.clear();
  });
  c.Start();
  ASSERT_TRUE(Eventually([&] { return !c.node(1)->Health().ok(); }));
  EXPECT_NE(c.node(1)->Health().message().find("sent no listen_address"), std::string::npos)
      << c.node(1)->Health();
  EXPECT_EQ(c.node(0)->counters().updates_applied(), 0u);
}

// A dial that is never answered (the peer accepted nothing: a partition, a
// stopped process) is abandoned after the failure timeout and dialed again,
// so the pair connects once the network heals.
// Driven by the nodes' clock: 1.5 s of dials into the partition (two dial
// deadlines of 800 ms here) and the heal take no sleep.
TEST(GossipNode, UnansweredDialIsRetriedAfterHealing) {
  ManualClock clock;
  Nodes c(2, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); });
  c.net().Partition({{c.node(0)}, {c.node(1)}});
  c.Start();
  StepUntil(
      c, clock, [] { return false; }, milliseconds(1500), milliseconds(100));
  EXPECT_EQ(c.node(0)->counters().updates_applied(), 0u);
  c.net().Heal();
  c.Publish(0, 1, 5);
  EXPECT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 5;
      },
      seconds(5), milliseconds(100)))
      << VersionJson(c.node(1)->Applied());
}

// A slow but intact link (latency well above the repair timeout) loses
// nothing, so nothing may be sent twice: repairs go only where a message was
// lost. (Before: every lag past the repair timeout re-sent all of it.)
// Node 0 of a two-node cluster sees node 1 alive.
// The options MakeMessage reads of an origin (a scripted member's).
NodeOptions OriginOf(const std::string& node_id, uint64_t incarnation) {
  NodeOptions o;
  o.node_id = node_id;
  o.incarnation = incarnation;
  return o;
}

bool PeerAlive(Nodes& c) {
  return Eventually([&] {
    v1::NodeStatus s;
    c.node(0)->FillStatus(&s);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  });
}

// Every node sees every other alive, now.
bool AllAliveNow(Nodes& c) {
  for (int i = 0; i < c.size(); ++i) {
    v1::NodeStatus s;
    c.node(i)->FillStatus(&s, false);
    if (s.members_size() != c.size() - 1) return false;
    for (const auto& m : s.members()) {
      if (m.state() != "alive") return false;
    }
  }
  return true;
}
// ... within 10 s.
bool AllAlive(Nodes& c) {
  return Eventually([&] { return AllAliveNow(c); });
}

// Node `at` sees `peer` in `state` ("alive", "dead", ...), now.
bool SeesAs(Nodes& c, int at, const std::string& peer, const std::string& state) {
  v1::NodeStatus s;
  c.node(at)->FillStatus(&s, false);
  for (const auto& m : s.members()) {
    if (m.node_id() == peer) return m.state() == state;
  }
  return false;
}

// A member's heartbeat may name members nobody ever reached (made up, or an
// old pod's name): they used to count against the ending's majority for
// ever, dead, so two nodes and three invented names never ended. A member
// counts once this node reached it or a member it reached said it hears
// it; those nobody heard count for nothing.
TEST(GossipNode, MembersNobodyHeardDoNotCountAgainstTheMajority) {
  ManualClock clock;
  Nodes c(2, milliseconds(0), nullptr, {}, &clock);
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
  {
    ScriptedPeer liar(c.node(0), "liar", 9, "inproc:liar");
    v1::GossipFrame heartbeat;
    for (int i = 0; i < 3; ++i) {
      v1::Member* ghost = heartbeat.mutable_heartbeat()->add_members();
      ghost->set_node_id(absl::StrCat("ghost", i));
      ghost->set_incarnation(1);
      ghost->set_address(absl::StrCat("inproc:ghost", i));
    }
    liar.Send(heartbeat);
    v1::GossipFrame leave;
    leave.mutable_leave()->set_reason("done lying");
    liar.Send(leave);
  }
  // Node 1 learns of the ghosts from node 0's member list.
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        v1::NodeStatus s;
        c.node(1)->FillStatus(&s, false);
        return s.members_size() == 4;  // n0 and the ghosts (the liar left)
      },
      seconds(5)));
  c.Publish(0, 1, 5);
  c.Publish(1, 1, 5);
  for (const absl::Status& s : QuiesceOn(c, clock, seconds(5))) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.node(0)->MirrorHash(), c.node(1)->MirrorHash());
}

// A member list can name anyone: names nobody heard (heard: false) and
// this node never reached used to stay in the member table for good, so
// one member's lists of made-up names filled it (1,024) and every real
// worker that came later was refused ("this cluster already has 1024
// members"), while the node worked for all of them on every tick
// (reckon-attacker). Such a name is dialed for a failure timeout and then
// forgotten; and a real worker's Hello takes the place of one while the
// table is full.
TEST(GossipNode, NamesNobodyHeardAreForgottenAndGiveWayToARealMember) {
  Nodes c(1, milliseconds(0), [](int, NodeOptions& o) { o.max_members = 8; });
  c.Start();
  GossipNode* node = c.node(0);
  auto members = [&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    return s.members_size();
  };
  ScriptedPeer liar(node, "liar", 9, "inproc:liar");
  v1::GossipFrame list;
  for (int i = 0; i < 20; ++i) {
    v1::Member* ghost = list.mutable_heartbeat()->add_members();
    ghost->set_node_id(absl::StrCat("ghost", i));
    ghost->set_address(absl::StrCat("inproc:ghost", i));
    ghost->set_heard(false);
  }
  liar.Send(list);
  ASSERT_TRUE(Eventually([&] { return members() == 8; }));  // full: the liar and 7 names
  // A real worker comes: a name gives way.
  ScriptedPeer real(node, "real", 3, "inproc:real");
  ASSERT_TRUE(Eventually([&] { return SeqOf(node->Applied(), OriginKey{"real", 3}) == 0 &&
                                      node->counters().members_refused() >= 13 &&
                                      [&] {
                                        v1::NodeStatus s;
                                        node->FillStatus(&s, false);
                                        for (const auto& m : s.members())
                                          if (m.node_id() == "real") return m.state() == "alive";
                                        return false;
                                      }(); }));
  // A failure timeout (400 ms here) later the names are gone: the liar and
  // the real worker stay.
  ASSERT_TRUE(Eventually([&] { return members() == 2; })) << members();
}

// What a member with the token can still do (docs/gossip.md "Threat
// model"): change the others' learning rate and momentum by claiming to
// train. Every alive member that has not said training_done counts among
// the workers training, which the momentum match divides by (worker/
// trainer.cc RematchMomentum): three identities of one attacker took a
// cluster of three from x3.7 to x5.52 its learning rate. It lasts while
// they are alive; one that says it is done, leaves or dies counts no more.
TEST(GossipNode, AMemberThatSaysItTrainsCountsAmongTheWorkersTraining) {
  Nodes c(1);
  c.Start();
  GossipNode* node = c.node(0);
  EXPECT_EQ(node->TrainingMembers(), 1);
  ScriptedPeer a(node, "a", 7, "inproc:a");
  ScriptedPeer b(node, "b", 8, "inproc:b");
  ASSERT_TRUE(Eventually([&] { return node->TrainingMembers() == 3; }));
  v1::GossipFrame done;
  done.mutable_heartbeat()->set_training_done(true);
  a.Send(done);
  ASSERT_TRUE(Eventually([&] { return node->TrainingMembers() == 2; }));
  v1::GossipFrame leave;
  leave.mutable_leave()->set_reason("gone");
  b.Send(leave);
  ASSERT_TRUE(Eventually([&] { return node->TrainingMembers() == 1; }));
}

TEST(GossipNode, SlowIntactLinkGetsNoRepairs) {
  // 400 ms one way; repair timeout 100 ms; a failure timeout the link allows.
  // On the nodes' clock, the link's latency too.
  ManualClock clock;
  Nodes c(
      2, milliseconds(400),
      [](int i, NodeOptions& o) {
        o.failure_timeout = seconds(2);
        SeedOnlyLaterNodes(i, 2, o);
      },
      {}, &clock);
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
  const uint64_t repairs_before = c.node(0)->counters().repairs_sent();
  for (int k = 0; k < 50; ++k) {  // 200 messages, four a heartbeat interval
    c.Publish(0, 1 + 4 * k, 4);
    StepFor(c, clock, milliseconds(20));
  }
  EXPECT_LT(SeqOf(c.node(1)->Applied(), {"n0", 1000}), 200u) << "the last are 400 ms away";
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 200;
      },
      seconds(5)));
  StepFor(c, clock, seconds(1));  // many heartbeats more
  EXPECT_EQ(repairs_before, 0u);
  EXPECT_EQ(c.node(0)->counters().repairs_sent(), 0u);
  EXPECT_EQ(c.node(1)->counters().duplicates_dropped(), 0u);
  EXPECT_EQ(c.net().counters().update_frames, 200u);
}

// A live origin's stream to a member is slow, not cut: its updates reach n2
// a second late (longer than the failure timeout), behind a queue that the
// heartbeats overtake. n2 advances on n0 all along, so n1 must not relay
// n0's messages to it: each copy would double that slow link's load. (Once
// relayed when a message was a failure timeout old: about every message.)
TEST(GossipNode, OriginsQueuedStreamIsNotDoubledByRelays) {
  ManualClock clock;
  Nodes c(
      3, milliseconds(0), [](int i, NodeOptions& o) { SeedOnlyLaterNodes(i, 3, o); }, {}, &clock);
  c.net().DelayUpdates(c.node(0), c.node(2), milliseconds(1000));
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
  const OriginKey n0{"n0", 1000};
  // 300 messages, two a heartbeat interval (3 s). The first second n2 hears
  // nothing of n0's updates (it hears its heartbeats: n1 relays nothing);
  // from 1.5 s on there are no relays either.
  uint64_t relays_before = 0;
  for (int k = 0; k < 150; ++k) {
    if (k == 40) {
      // 0.8 s in: n0's first update is still 1 s on its way to n2.
      EXPECT_EQ(SeqOf(c.node(2)->Applied(), n0), 0u);
    }
    if (k == 75) {
      ASSERT_GE(SeqOf(c.node(2)->Applied(), n0), 20u);
      relays_before = c.node(1)->counters().repairs_sent();
    }
    c.Publish(0, 1 + 2 * k, 2);
    StepFor(c, clock, milliseconds(20));
  }
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return SeqOf(c.node(2)->Applied(), n0) == 300; }, seconds(5)));
  StepFor(c, clock, milliseconds(300));  // heartbeats more
  EXPECT_EQ(c.node(1)->counters().repairs_sent(), relays_before);
  EXPECT_EQ(c.node(0)->counters().repairs_sent(), 0u);
}

// The relay covers a member a live origin cannot reach: n0 and n2 are cut
// from each other only, so n2 never hears n0 and says so; n1 relays n0's
// messages to it, and all end with the same replica. Each relay is n1's
// first copy of that message to n2: a repair, not a resend.
TEST(GossipNode, LiveOriginsMessagesReachAMemberItCannotReachThroughAnother) {
  ManualClock clock;
  Nodes c(3, milliseconds(0), nullptr, {}, &clock);
  c.net().Cut(c.node(0), c.node(2));
  c.Start();
  for (int k = 0; k < 10; ++k) {  // two a heartbeat interval
    c.Publish(0, 1 + 2 * k, 2);
    StepFor(c, clock, milliseconds(20));
  }
  const OriginKey n0{"n0", 1000};
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return SeqOf(c.node(2)->Applied(), n0) == 20; }, seconds(10)))
      << VersionJson(c.node(2)->Applied());
  EXPECT_GE(c.node(1)->counters().repairs_sent(), 20u);
  EXPECT_EQ(c.node(1)->counters().repairs_resent(), 0u);
  EXPECT_EQ(c.node(2)->MirrorHash(), c.node(0)->MirrorHash());
}

void TreeOverlay(int, NodeOptions& o) { o.fingerprint.set_overlay(v1::GOSSIP_OVERLAY_TREE); }

// The tree overlay (server/overlay.h) against the mesh, 8 members: each
// member gets each of n0's messages exactly once either way (7 copies a
// message in all, no duplicate), but in the tree n0 sends only to the
// members 1, 2 and 4 after it on the ring, and they forward.
TEST(GossipNode, TheTreeSpreadsTheOriginsCopiesAndDeliversEachOnce) {
  for (const bool tree : {false, true}) {
    SCOPED_TRACE(tree ? "tree" : "mesh");
    // A failure timeout a loaded machine cannot reach: no member is ever
    // marked dead, and n0's backstop (MayRelayInTree) never sends.
    Nodes c(8, milliseconds(0), [tree](int i, NodeOptions& o) {
      if (tree) TreeOverlay(i, o);
      o.failure_timeout = seconds(3);
    });
    c.Start();
    ASSERT_TRUE(AllAlive(c));
    const uint64_t frames_before = c.net().counters().update_frames;
    c.Publish(0, 1, 50, milliseconds(2));
    const OriginKey n0{"n0", 1000};
    ASSERT_TRUE(Eventually([&] {
      for (int i = 1; i < 8; ++i) {
        if (SeqOf(c.node(i)->Applied(), n0) != 50) return false;
      }
      return true;
    }));
    // What else sent update frames, should a count be off (once, under
    // ASan, n0 sent and the network carried 351 in the mesh, with no
    // duplicate dropped: a frame resent after its stream closed?).
    const auto others = [&] {
      std::string said;
      for (int i = 0; i < 8; ++i) {
        const v1::NodeCounters& k = c.node(i)->counters();
        absl::StrAppend(&said, " n", i, ": repairs ", k.repairs_sent(), " (", k.repairs_resent(),
                        " resent), queue drops ", k.queue_drops(), ", members failed ",
                        k.members_failed(), ";");
      }
      return said;
    };
    EXPECT_EQ(c.node(0)->counters().update_frames_sent(), tree ? 3u * 50 : 7u * 50) << others();
    EXPECT_EQ(c.net().counters().update_frames - frames_before, 7u * 50) << others();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(c.node(i)->counters().duplicates_dropped(), 0u) << i;
      EXPECT_EQ(c.node(i)->MirrorHash(), c.node(0)->MirrorHash()) << i;
    }
    if (tree) {
      // n3 is a leaf of n0's tree; n2 forwards to it, n4 to n5 and n6.
      EXPECT_EQ(c.node(3)->counters().update_frames_sent(), 0u);
      EXPECT_EQ(c.node(2)->counters().update_frames_sent(), 50u);
      EXPECT_EQ(c.node(4)->counters().update_frames_sent(), 2u * 50);
    }
    EXPECT_TRUE(AllAlive(c)) << "the fewer heartbeats to non-neighbours still keep all alive";
  }
}

// A mesh member does not forward: in a tree cluster the members below it
// would get their messages seconds late. The overlay is in the fingerprint,
// so the mix is refused, naming it.
TEST(GossipNode, AMeshMemberIsRefusedByATreeCluster) {
  Nodes c(2, milliseconds(0), [](int i, NodeOptions& o) {
    if (i == 1) TreeOverlay(i, o);
  });
  c.Start();
  ASSERT_TRUE(Eventually([&] { return !c.node(0)->Health().ok() && !c.node(1)->Health().ok(); }));
  EXPECT_NE(c.node(1)->Health().message().find(
                "cluster fingerprint mismatch: overlay is GOSSIP_OVERLAY_TREE on 'n1' but "
                "GOSSIP_OVERLAY_MESH on 'n0'"),
            std::string::npos)
      << c.node(1)->Health();
}

// A worker without --pretrain-samples would start from the seed's weights
// beside the pre-trained start of the others (or wait for a start no one
// publishes): the count is in the fingerprint, and the mix is refused.
TEST(GossipNode, AMemberThatDoesNotPretrainIsRefusedByOneThatDoes) {
  Nodes c(2, milliseconds(0), [](int i, NodeOptions& o) {
    if (i == 1) o.fingerprint.set_pretrain_samples(6000);
  });
  c.Start();
  ASSERT_TRUE(Eventually([&] { return !c.node(0)->Health().ok() && !c.node(1)->Health().ok(); }));
  EXPECT_NE(c.node(1)->Health().message().find(
                "cluster fingerprint mismatch: pretrain samples is 6000 on 'n1' but 0 on 'n0'"),
            std::string::npos)
      << c.node(1)->Health();
}

// The frames and bytes a node sends are on /metrics (server/node_metrics.h),
// as the node counts them: in a tree of four, n0 sends each of its messages
// to n1 and n2 only.
TEST(GossipNode, MetricsCountTheUpdateFramesAndBytesSent) {
  Nodes c(4, milliseconds(0), [](int i, NodeOptions& o) {
    TreeOverlay(i, o);
    o.failure_timeout = seconds(3);
  });
  c.Start();
  ASSERT_TRUE(AllAlive(c));
  c.Publish(0, 1, 20, milliseconds(2));
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(3)->Applied(), {"n0", 1000}) == 20; }));
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : NodeMetrics(c.node(0)).Collect()) {
    if (family.metric.size() == 1) values[family.name] = family.metric[0].counter.value;
  }
  EXPECT_EQ(values["reckon_update_frames_sent_total"], 2 * 20);
  const GossipNode::Counters counters = c.node(0)->counters();
  // Heartbeats go on: the counters read after the scrape are at least its.
  EXPECT_GT(values["reckon_gossip_sent_bytes_total"], 20 * 100);
  EXPECT_LE(values["reckon_gossip_sent_bytes_total"], double(counters.bytes_sent()));
  EXPECT_GT(values["reckon_gossip_received_bytes_total"], 0);
  EXPECT_LE(values["reckon_gossip_received_bytes_total"], double(counters.bytes_received()));
}

// Time is the node's clock (NodeOptions::clock), which a test drives: the
// default timeouts hold to the tick (20 ms here), with no 10 s sleep. An
// accepted stream that says nothing is open at 9.98 s and closed at 10.02 s
// (hello_timeout); a member that falls silent is alive 2.98 s after its last
// frame and dead at 3.02 s (failure_timeout). The member's heartbeats from
// the node show each tick the test waits for.
TEST(GossipNode, DefaultTimeoutsHoldToTheTickOnTheNodesClock) {
  ManualClock clock;
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) {
    o.clock = clock.Function();
    o.failure_timeout = NodeOptions{}.failure_timeout;
    o.hello_timeout = NodeOptions{}.hello_timeout;
  });
  c.Start();
  GossipNode* node = c.node(0);
  auto silent = std::make_shared<ScriptedLink>(node);
  node->OnLinkUp(silent);
  ScriptedPeer member(node, "w1", 7, "inproc:w1");
  auto member_alive = [&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  };
  ASSERT_TRUE(Eventually(member_alive));
  // Moves the clock and waits for the one tick that follows (it sends the
  // member a heartbeat while it is alive).
  auto step = [&](milliseconds by) {
    const size_t before = member.link().sent().size();
    clock.Advance(by);
    return Eventually([&] { return member.link().sent().size() > before; });
  };
  auto member_speaks = [&] {
    const uint64_t before = node->counters().bytes_received();
    v1::GossipFrame heartbeat;
    heartbeat.mutable_heartbeat()->set_local_steps(1);
    member.Send(std::move(heartbeat));
    // Handled (counted) before the clock moves on.
    ASSERT_TRUE(Eventually([&] { return node->counters().bytes_received() > before; }));
  };
  for (int i = 0; i < 3; ++i) {
    member_speaks();
    ASSERT_TRUE(step(milliseconds(2500)));
  }
  member_speaks();                        // at 7.5 s, its last word
  ASSERT_TRUE(step(milliseconds(2480)));  // 9.98 s
  EXPECT_FALSE(silent->closed());
  EXPECT_EQ(node->counters().hello_timeouts(), 0u);
  ASSERT_TRUE(step(milliseconds(40)));  // 10.02 s
  ASSERT_TRUE(Eventually([&] { return silent->closed(); }));
  EXPECT_EQ(node->counters().hello_timeouts(), 1u);
  ASSERT_TRUE(step(milliseconds(460)));  // 10.48 s: 2.98 s since the member spoke
  EXPECT_TRUE(member_alive());
  EXPECT_EQ(node->counters().members_failed(), 0u);
  clock.Advance(milliseconds(40));  // 3.02 s
  ASSERT_TRUE(Eventually([&] { return node->counters().members_failed() == 1; }));
  EXPECT_FALSE(member_alive());
}

// A heartbeat carried the whole version vector, 10 to 20 times a second to
// every member: a member with the token that fills it with 4,096 made-up
// origins made every heartbeat ~100 KiB, copied per member, parsed and
// walked on arrival, and the workers spent most of their CPU on it
// (reckon-attacker's long form: a /status took 2 s, heartbeats missed).
// A heartbeat carries the vector's changes since the previous one on the
// stream (applied_changes_only), whole only on a stream's first, with the
// member list, after a skipped tick; the receiver sets what changed and
// keeps the rest.
TEST(GossipNode, HeartbeatsCarryTheVectorsChangesAndTheReceiverKeepsTheRest) {
  ManualClock clock;
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer member(node, "w1", 7, "inproc:w1");
  ASSERT_TRUE(Eventually([&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  }));
  auto heartbeats = [&] {
    std::vector<v1::Heartbeat> out;
    for (const auto& f : member.link().sent()) {
      if (f->has_heartbeat()) out.push_back(f->heartbeat());
    }
    return out;
  };
  auto next_tick = [&] {
    const size_t before = heartbeats().size();
    clock.Advance(node->options().heartbeat_interval);
    return Eventually([&] { return heartbeats().size() > before; });
  };
  ASSERT_TRUE(next_tick());
  c.Publish(0, 1, 2);  // n0's seq 1 and 2
  ASSERT_TRUE(next_tick());
  ASSERT_TRUE(next_tick());  // nothing changed
  std::vector<v1::Heartbeat> got = heartbeats();
  ASSERT_GE(got.size(), 4u);
  EXPECT_FALSE(got[0].applied_changes_only()) << "a stream's first heartbeat is whole";
  EXPECT_GT(got[0].members_size(), 0);
  const v1::Heartbeat& changed = got[got.size() - 2];
  EXPECT_TRUE(changed.applied_changes_only());
  ASSERT_EQ(changed.applied().entries_size(), 1) << changed.DebugString();
  EXPECT_EQ(changed.applied().entries(0).origin().node_id(), "n0");
  EXPECT_EQ(changed.applied().entries(0).seq(), 2u);
  EXPECT_TRUE(got.back().applied_changes_only());
  EXPECT_EQ(got.back().applied().entries_size(), 0);
  // The member list goes with the whole vector, every member_list_every-th.
  for (int i = 0; i < node->options().member_list_every; ++i) ASSERT_TRUE(next_tick());
  got = heartbeats();
  for (size_t i = 0; i < got.size(); ++i) {
    const v1::Heartbeat& hb = got[i];
    EXPECT_EQ(hb.applied_changes_only(), hb.members_size() == 0) << hb.DebugString();
    if (i > 0 && !hb.applied_changes_only()) {
      EXPECT_EQ(hb.applied().entries_size(), 1) << "n0 published before it";
    }
  }

  // The receiving side: w1's whole vector, then its changes.
  auto lag = [&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    return s.members(0).lag();
  };
  auto member_says = [&](bool changes_only, std::vector<std::pair<std::string, uint64_t>> entries) {
    const uint64_t before = node->counters().bytes_received();
    v1::GossipFrame f;
    f.mutable_heartbeat()->set_applied_changes_only(changes_only);
    for (const auto& [id, seq] : entries) {
      v1::VersionEntry* e = f.mutable_heartbeat()->mutable_applied()->add_entries();
      e->mutable_origin()->set_node_id(id);
      e->mutable_origin()->set_incarnation(id == "n0" ? 1000 : 1);
      e->set_seq(seq);
    }
    member.Send(std::move(f));
    ASSERT_TRUE(Eventually([&] { return node->counters().bytes_received() > before; }));
  };
  member_says(false, {{"n0", 1}});
  EXPECT_EQ(lag(), 1);
  member_says(true, {{"x", 4}});  // another origin changed; n0 stays at 1
  EXPECT_EQ(lag(), 1);
  member_says(true, {{"n0", 2}});
  EXPECT_EQ(lag(), 0);
  member_says(false, {{"x", 4}});  // whole: n0 absent is 0
  EXPECT_EQ(lag(), 2);
  EXPECT_EQ(node->counters().frames_refused(), 0u);
}

// The counters are one proto message (NodeCounters): /metrics exposes every
// field of it, with its help and the value the node counted, a map field
// once per codec label; status carries the same message. A counter added
// to the proto needs nothing else to be watched.
TEST(GossipNode, EveryCounterOfTheProtoIsOnMetricsWithItsHelp) {
  Nodes c(2);
  c.Start();
  ASSERT_TRUE(PeerAlive(c));
  c.Publish(0, 1, 5, milliseconds(1));
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 5; }));
  c.StopAll();  // nothing counts between the scrape and the reads below
  std::map<std::string, const prometheus::MetricFamily*> families;
  const std::vector<prometheus::MetricFamily> collected = NodeMetrics(c.node(1)).Collect();
  for (const prometheus::MetricFamily& f : collected) families[f.name] = &f;
  const GossipNode::Counters counters = c.node(1)->counters();
  v1::NodeStatus status;
  c.node(1)->FillStatus(&status, false);
  EXPECT_EQ(status.counters().SerializeAsString(), counters.SerializeAsString());
  const google::protobuf::Descriptor* d = counters.GetDescriptor();
  ASSERT_GE(d->field_count(), 30);
  for (int i = 0; i < d->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = d->field(i);
    const v1::MetricOptions& metric = field->options().GetExtension(v1::metric);
    const std::string name =
        metric.name().empty() ? "reckon_" + field->name() + "_total" : metric.name();
    ASSERT_TRUE(families.count(name)) << field->name() << " is not on /metrics as " << name;
    const prometheus::MetricFamily& family = *families[name];
    EXPECT_EQ(family.type, prometheus::MetricType::Counter) << name;
    EXPECT_GE(family.help.size(), 20u) << name << ": the proto gives it no help";
    if (field->is_map()) {
      EXPECT_EQ(family.metric.size(), 5u) << name << ": one per codec";
      continue;
    }
    ASSERT_EQ(family.metric.size(), 1u) << name;
    const double value = double(counters.GetReflection()->GetUInt64(counters, field));
    EXPECT_EQ(family.metric[0].counter.value, field->name().ends_with("_ms") ? value / 1000 : value)
        << name;
  }
  EXPECT_EQ(counters.updates_applied(), 5u);
  EXPECT_EQ(counters.updates_received().at("rice"), 5u);
  for (const prometheus::ClientMetric& m : families["reckon_updates_received_total"]->metric) {
    EXPECT_EQ(m.counter.value, m.label[1].value == "rice" ? 5 : 0) << m.label[1].value;
  }
}

// A member inside the tree fails (n4 forwards n0's messages to n5 and n6):
// once the others mark it dead their rings close over the gap, n5 and n6
// get everything, and all the living end identical.
TEST(GossipNode, TheTreeClosesOverAFailedMember) {
  ManualClock clock;
  Nodes c(8, milliseconds(0), TreeOverlay, {}, &clock);
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
  c.Publish(0, 1, 10);
  const OriginKey n0{"n0", 1000};
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return SeqOf(c.node(4)->Applied(), n0) == 10; }, seconds(5)));
  c.node(4)->Stop(/*leave=*/false, milliseconds(0));
  for (int k = 0; k < 20; ++k) {  // 40 more, two a heartbeat interval
    c.Publish(0, 11 + 2 * k, 2);
    StepFor(c, clock, milliseconds(20));
  }
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        for (int i : {1, 2, 3, 5, 6, 7}) {
          if (SeqOf(c.node(i)->Applied(), n0) != 50) return false;
        }
        return true;
      },
      seconds(10)))
      << VersionJson(c.node(5)->Applied());
  for (int i : {1, 2, 3, 5, 6, 7}) {
    EXPECT_EQ(c.node(i)->MirrorHash(), c.node(0)->MirrorHash()) << i;
  }
  EXPECT_EQ(SeqOf(c.node(4)->Applied(), n0), 10u) << "it failed after the first ten";
}

// The member list (O(members) bytes) rides on the first heartbeat of a
// stream and then on every member_list_every-th: on every heartbeat to every
// member it made the mesh's heartbeat bytes grow with members squared. A
// heartbeat without it keeps what the last list said (who hears whom).
// Driven by the node's clock, one heartbeat interval at a time: one
// heartbeat a tick. (It slept 700 ms and wanted 20 or more, while the
// silent peer was marked dead at 400 ms: 19 on a loaded machine.)
TEST(GossipNode, HeartbeatsCarryTheMemberListEveryTenthOnly) {
  ManualClock clock;
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) {
    o.clock = clock.Function();
    o.failure_timeout = seconds(10);  // the scripted peer says nothing more
  });
  c.Start();
  ScriptedPeer peer(c.node(0), "s", 5, "inproc:s");
  auto heartbeats_sent = [&] {
    int n = 0;
    for (const auto& frame : peer.link().sent()) n += frame->has_heartbeat();
    return n;
  };
  auto tick = [&] {
    const int before = heartbeats_sent();
    clock.Advance(c.options(0).heartbeat_interval);
    return Eventually([&] { return heartbeats_sent() > before; });
  };
  // Its Hello answered, then one tick: whether the node's first tick (due
  // at its start) came before the Hello or after, it is over by then.
  ASSERT_TRUE(Eventually([&] { return !peer.link().sent().empty(); }));
  ASSERT_TRUE(tick());
  const int at_start = heartbeats_sent();
  for (int i = 0; i < 35; ++i) ASSERT_TRUE(tick()) << i;
  int heartbeats = 0, with_list = 0;
  bool first_has_list = false;
  for (const auto& frame : peer.link().sent()) {
    if (!frame->has_heartbeat()) continue;
    if (heartbeats == 0) first_has_list = frame->heartbeat().members_size() > 0;
    ++heartbeats;
    if (frame->heartbeat().members_size() > 0) {
      ++with_list;
      EXPECT_EQ(frame->heartbeat().members(0).node_id(), "n0");  // the sender first
    }
  }
  EXPECT_EQ(heartbeats, at_start + 35);  // one a tick
  EXPECT_TRUE(first_has_list);
  EXPECT_EQ(with_list, (heartbeats + 9) / 10);  // the 1st, 11th, 21st, ...
}

// What a member's heartbeats say can add at most one address per member to
// what this node dials: a list naming a thousand addresses for one id, a
// member never reached that moved, a member that restarted elsewhere (an old
// pod IP), and invented members past the member cap. Every address used to
// become a dial target, redialed forever.
TEST(GossipNode, AnnouncedAddressesAreOnePerMemberAndForgottenWhenItMoves) {
  ManualClock clock;
  Nodes c(
      1, milliseconds(0), [](int, NodeOptions& o) { o.max_members = 8; }, {}, &clock);
  c.Start();
  // Two ticks: every frame sent before them has been handled.
  auto handled = [&] { StepFor(c, clock, milliseconds(40)); };
  GossipNode* node = c.node(0);
  auto status = [&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    return s;
  };
  const uint64_t at_start = status().dial_targets();
  ScriptedPeer a(node, "a", 7, "inproc:a");
  auto list = [](const std::vector<std::pair<std::string, std::string>>& members,
                 bool heard = true) {
    v1::GossipFrame f;
    for (const auto& [id, address] : members) {
      v1::Member* m = f.mutable_heartbeat()->add_members();
      m->set_node_id(id);
      m->set_address(address);
      m->set_heard(heard);
    }
    return f;
  };
  std::vector<std::pair<std::string, std::string>> many;
  for (int i = 0; i < 1000; ++i) many.push_back({"b", absl::StrCat("10.0.0.", i, ":7070")});
  a.Send(list(many));
  auto member_address = [&](const std::string& id) -> std::string {
    const v1::NodeStatus now = status();
    for (const auto& m : now.members()) {
      if (m.node_id() == id) return m.address();
    }
    return "(not a member)";
  };
  ASSERT_TRUE(Eventually([&] { return member_address("b") != "(not a member)"; }));
  handled();
  EXPECT_EQ(status().dial_targets(), at_start + 2) << "a's address and one of b's";
  // b, never reached, moved: dialed at its new address only, and only
  // when the member saying so hears b (one that does not may know an old
  // address).
  a.Send(list({{"b", "10.0.2.2:7070"}}, /*heard=*/false));
  a.Send(list({{"b", "10.0.1.1:7070"}}));
  ASSERT_TRUE(Eventually([&] { return member_address("b") == "10.0.1.1:7070"; }));
  a.Send(list({{"b", "10.0.2.2:7070"}}, /*heard=*/false));
  handled();
  EXPECT_EQ(member_address("b"), "10.0.1.1:7070");
  EXPECT_EQ(status().dial_targets(), at_start + 2);
  // a restarted elsewhere (its old process gone): its old address is
  // dialed no more.
  a.Close();
  ScriptedPeer a_again(node, "a", 8, "inproc:a-new");
  ASSERT_TRUE(Eventually([&] { return member_address("a") == "inproc:a-new"; }));
  EXPECT_EQ(status().dial_targets(), at_start + 2);
  // What others say of a member we reached does not move it.
  a_again.Send(list({{"a", "10.9.9.9:1"}}));
  handled();
  EXPECT_EQ(member_address("a"), "inproc:a-new");
  // Invented members past the cap (8) are neither members nor dial targets.
  std::vector<std::pair<std::string, std::string>> invented;
  for (int i = 0; i < 50; ++i) invented.push_back({absl::StrCat("x", i), absl::StrCat("x:", i)});
  a_again.Send(list(invented));
  ASSERT_TRUE(Eventually([&] { return status().counters().members_refused() >= 44; }));
  EXPECT_LE(status().dial_targets(), at_start + 8);
}

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
  ASSERT_TRUE(Eventually([&] { return SeqOf(node->Applied(), OriginKey{"liar", 7}) == 1; }));
  // 16 origins, and the member's own beyond the cap.
  EXPECT_EQ(node->Applied().size(), 17u);
  v1::NodeStatus status;
  node->FillStatus(&status, false);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u);
  EXPECT_EQ(node->counters().origins_refused(), status.counters().origins_refused());
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
    node->FillStatus(&status, false);
    return status.early_held() + status.counters().origins_refused() == 200;
  })) << status.early_held() << " held, " << status.counters().origins_refused() << " refused";
  EXPECT_EQ(status.early_held(), 16u);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u);
  // Seq 1 of a held origin: applied, then its seq 2; still 16 origins.
  invented.node_id = "invented3";
  liar.SendUpdate(MakeMessage(invented, 1, rng, /*count=*/1).update);
  ASSERT_TRUE(Eventually([&] { return SeqOf(node->Applied(), OriginKey{"invented3", 1}) == 2; }));
  invented.node_id = "invented999";
  liar.SendUpdate(MakeMessage(invented, 1, rng, /*count=*/1).update);
  NodeOptions honest;
  honest.node_id = "liar";
  honest.incarnation = 7;
  liar.SendUpdate(MakeMessage(honest, 2, rng).update);
  liar.SendUpdate(MakeMessage(honest, 1, rng).update);
  ASSERT_TRUE(Eventually([&] { return SeqOf(node->Applied(), OriginKey{"liar", 7}) == 2; }));
  status.Clear();
  node->FillStatus(&status, false);
  EXPECT_EQ(status.counters().origins_refused(), 200u - 16u + 1u);
  EXPECT_EQ(SeqOf(node->Applied(), OriginKey{"invented999", 1}), 0u);
  EXPECT_EQ(status.early_held(), 15u);
  EXPECT_EQ(node->Applied().size(), 2u);
}

// A member of a token cluster invents more origins than --max-origins and
// shows each node others: each keeps the first it sees and refuses the rest,
// so the nodes' vectors differ for good. Before, they never met: each re-sent
// the other what it refuses on every heartbeat, for ever, and the ending
// waited out its deadline ("another version vector"). Now each tells the
// other which of its origins it refuses: the sender stops sending them, and
// both leave them out when they compare vectors at the ending. What the
// replicas hold then decides: the same weights (the refused messages moved
// nothing) end identical; different weights end at once with "replicas
// diverged", naming the refused origins, as any divergence does.
void ShowEachNodeOtherOrigins(Nodes& c, int steps_each) {
  std::mt19937_64 rng(11);
  for (int i = 0; i < 2; ++i) {
    ScriptedPeer liar(c.node(i), "liar", 7, "inproc:liar");
    for (int k = 0; k < 12; ++k) {
      NodeOptions invented = OriginOf(absl::StrCat("ghost", i, "-", k), 1);
      liar.SendUpdate(MakeMessage(invented, 1, rng, steps_each).update);
    }
    v1::GossipFrame leave;
    leave.mutable_leave()->set_reason("done lying");
    liar.Send(std::move(leave));
    liar.Close();
  }
}

// Two nodes with --max-origins 8 start, publish, and are shown each other's
// ghosts until each has refused some.
void StartAndShowEachNodeOtherOrigins(Nodes& c, int steps_each) {
  c.Start();
  c.Publish(0, 1, 3);
  c.Publish(1, 1, 3);
  ShowEachNodeOtherOrigins(c, steps_each);
  ASSERT_TRUE(Eventually([&] {
    return c.node(0)->counters().origins_refused() > 0 &&
           c.node(1)->counters().origins_refused() > 0;
  }));
}

TEST(GossipNode, OriginsRefusedPastTheCapAreNotResentAndEndIdenticalWhereTheyMovedNothing) {
  Nodes c(2, milliseconds(0), [](int, NodeOptions& o) { o.max_origins = 8; });
  // Each holds its own ghosts up to the cap and refuses the other's.
  ASSERT_NO_FATAL_FAILURE(StartAndShowEachNodeOtherOrigins(c, /*steps_each=*/0));
  const std::vector<absl::Status> results = c.Quiesce(seconds(20));
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(results[i].ok()) << i << ": " << results[i];
  EXPECT_EQ(c.node(0)->MirrorHash(), c.node(1)->MirrorHash());
  EXPECT_FALSE(SameVersions(c.node(0)->Applied(), c.node(1)->Applied()));
  // Told, neither sends the other what it refuses any more.
  const uint64_t repairs = c.node(0)->counters().repairs_sent() +
                           c.node(1)->counters().repairs_sent();
  std::this_thread::sleep_for(milliseconds(600));
  EXPECT_EQ(c.node(0)->counters().repairs_sent() + c.node(1)->counters().repairs_sent(), repairs);
  v1::NodeStatus status;
  c.node(0)->FillStatus(&status, false);
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
    return SeqOf(node->Applied(), OriginKey{"big", 7}) == 2;
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
  EXPECT_EQ(node->MirrorHash(), codec::WeightHashOf(expected));
  EXPECT_EQ(node->counters().weights_wrapped(), 1u);
  EXPECT_EQ(node->counters().decode_errors(), 0u);
}

// The two receive paths (NodeOptions::receive_path) take in the same frames
// and end the same: what is accepted and in which order, what is dropped and
// why (the counters), the replica. The frames: a member's messages with one
// early, duplicates, and three that fail validation (a lying checksum_delta,
// a corrupt payload, another model's size), the parallel path with one and
// two validation threads.
struct ReceiveOutcome {
  std::string hash;
  std::vector<uint64_t> accepted_seqs;
  uint64_t decode_errors = 0, duplicates_dropped = 0, updates_applied = 0;
  bool operator==(const ReceiveOutcome&) const = default;
};

ReceiveOutcome Receive(int threads) {
  Nodes c(1, milliseconds(0), [&](int, NodeOptions& o) { o.receive_threads = threads; });
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer member(node, "m", 3, "inproc:m");
  const NodeOptions origin = OriginOf("m", 3);
  std::mt19937_64 rng(5);
  std::vector<Message> m(1);  // m[seq]
  for (uint64_t seq = 1; seq <= 8; ++seq) m.push_back(MakeMessage(origin, seq, rng, 50));
  v1::Update lying = m[4].update;
  lying.set_checksum_delta(lying.checksum_delta() ^ 1);
  v1::Update corrupt = m[4].update;
  (*corrupt.mutable_payload())[3] ^= 0x55;
  v1::Update other_model = m[4].update;
  EXPECT_TRUE(codec::EncodeThresholdUpdate(m[4].decoded.words, kStep, kParams + 1,
                                           v1::CODEC_THRESHOLD_RICE, &other_model)
                  .ok());
  for (const v1::Update* u : {&m[1].update, &m[3].update, &m[2].update, &m[1].update, &lying,
                              &corrupt, &other_model, &m[4].update, &m[5].update, &m[3].update}) {
    member.SendUpdate(*u);
  }
  for (uint64_t seq = 6; seq <= 8; ++seq) member.SendUpdate(m[seq].update);
  EXPECT_TRUE(Eventually([&] { return SeqOf(node->Applied(), OriginKey{"m", 3}) == 8; }));
  // The last duplicate is handled with or after seq 8's batch.
  member.SendUpdate(m[8].update);
  EXPECT_TRUE(Eventually([&] { return node->counters().duplicates_dropped() == 3; }))
      << node->counters().DebugString();
  ReceiveOutcome out;
  out.hash = node->MirrorHash();
  for (const auto& u : node->TakeReceived().updates) out.accepted_seqs.push_back(u->seq);
  const GossipNode::Counters counters = node->counters();
  out.decode_errors = counters.decode_errors();
  out.duplicates_dropped = counters.duplicates_dropped();
  out.updates_applied = counters.updates_applied();
  return out;
}

TEST(GossipNode, AnyNumberOfValidationThreadsAcceptsAndRefusesTheSame) {
  const ReceiveOutcome alone = Receive(1);  // the node thread validates alone
  EXPECT_EQ(alone.accepted_seqs, (std::vector<uint64_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(alone.decode_errors, 3u);
  EXPECT_EQ(alone.updates_applied, 8u);
  EXPECT_EQ(Receive(2), alone);
  EXPECT_EQ(Receive(4), alone);
}

// A node that joined from a snapshot holds nothing of an origin before its
// cut. A member behind that cut used to be told by it to re-join from a
// snapshot (ResyncRequired), though the origin itself is alive, heard by
// that member, and serves what it lacks from its own log: a spurious
// second snapshot (seen as GossipCluster.WorkersBeyondStartWorkers...
// loading two). Telling a member to re-join for a live origin it hears is
// the origin's call; for our own messages, or an origin it does not hear,
// it is still ours.
// The node joined from a snapshot (the initial weights) at `origin`'s `seq`:
// nothing of that origin in its log.
void JoinFromASnapshotAt(GossipNode* node, const OriginKey& origin, uint64_t seq) {
  ASSERT_TRUE(node->InstallSnapshot(
                      InitialWeights(), {{origin, seq}},
                      codec::WeightChecksum(Fingerprint().seed()).Of(InitialWeights()), "test")
                  .ok());
}

// One node (failure timeout 3 s, on a ManualClock) that joined from a
// snapshot at seq 10 of origin a; b comes, behind that cut (a:5), saying
// nothing of whom it hears. Step(by): b speaks (and a, when it is
// `reached`: alive to the node), then the clock moves one heartbeat
// interval `by`. Resyncs(): what b was told to re-join for.
class BehindTheCut {
 public:
  explicit BehindTheCut(bool reached)
      : nodes_(1, milliseconds(0), [this](int, NodeOptions& o) {
          o.clock = clock_.Function();
          o.failure_timeout = seconds(3);
        }) {
    nodes_.Start();
    JoinFromASnapshotAt(node(), a_, 10);
    if (reached) origin_.emplace(node(), "a", 7, "inproc:a");
    newcomer_.emplace(node(), "b", 8, "inproc:b");
  }
  GossipNode* node() { return nodes_.node(0); }
  void Step(milliseconds by) {
    const uint64_t received = node()->counters().bytes_received();
    uint64_t sent = 0;
    if (origin_) {
      v1::GossipFrame alive;
      alive.mutable_heartbeat()->set_local_steps(1);
      sent += alive.ByteSizeLong();
      origin_->Send(alive);
    }
    v1::GossipFrame behind;
    ToProto({{a_, 5}}, behind.mutable_heartbeat()->mutable_applied());
    sent += behind.ByteSizeLong();
    newcomer_->Send(behind);
    ASSERT_TRUE(Eventually([&] { return node()->counters().bytes_received() >= received + sent; }));
    const size_t before = newcomer_->link().sent().size();
    clock_.Advance(by);
    ASSERT_TRUE(Eventually([&] { return newcomer_->link().sent().size() > before; }));
  }
  int Resyncs() {
    int n = 0;
    for (const auto& frame : newcomer_->link().sent()) n += frame->has_resync();
    return n;
  }

 private:
  ManualClock clock_;
  Nodes nodes_;
  const OriginKey a_{"a", 7};
  std::optional<ScriptedPeer> origin_, newcomer_;
};

// A member that has just come (its heartbeats have not said yet whom it
// hears) is not told to re-join for a live origin either: within a failure
// timeout of its coming it may still be connecting to that origin, which
// then serves it. Seen as WorkersBeyondStartWorkers... loading two
// snapshots under ASan: a joiner's first heartbeat reached another joiner
// before its handshake with the origin. Driven by the node's clock.
TEST(GossipNode, NoResyncToAMemberNotYetKnownToHearALiveOrigin) {
  BehindTheCut t(/*reached=*/true);
  for (int i = 0; i < 10; ++i) t.Step(milliseconds(250));  // 2.5 s: still new
  EXPECT_EQ(t.Resyncs(), 0) << "told to re-join while it may still be reaching a";
  // A failure timeout with us and still not hearing a: we are its only way.
  t.Step(milliseconds(600));
  ASSERT_TRUE(Eventually([&] { return t.Resyncs() == 1; }));
}

// A node that has just started (joined from a snapshot, its dials still
// out) has not reached an origin yet: it cannot tell that origin is gone.
// A member behind that origin was told to re-join at once, though the
// origin, alive, would serve it from its own log: a spurious second
// snapshot (GossipCluster.WorkersBeyondStartWorkers... loading two in CI:
// the joiner w2 reached w1 before w0, the origin). Only once the node had a
// failure timeout to reach the origin and has not is it presumed gone, and
// the member told to re-join.
TEST(GossipNode, NoResyncForAnOriginNotReachedYetWithinAFailureTimeoutOfTheStart) {
  BehindTheCut t(/*reached=*/false);
  for (int i = 0; i < 10; ++i) t.Step(milliseconds(250));  // 2.5 s since the start
  EXPECT_EQ(t.Resyncs(), 0) << "told to re-join for an origin we may still be reaching";
  // A failure timeout since the start and a never reached: presumed gone,
  // and we are b's only way.
  t.Step(milliseconds(600));
  ASSERT_TRUE(Eventually([&] { return t.Resyncs() == 1; }));
}

TEST(GossipNode, NoResyncForALiveOriginTheMemberHears) {
  ManualClock clock;
  Nodes c(1, milliseconds(0), nullptr, {}, &clock);
  c.Start();
  GossipNode* node = c.node(0);
  const OriginKey a{"a", 7};
  JoinFromASnapshotAt(node, a, 10);
  ScriptedPeer origin(node, "a", 7, "inproc:a");  // a is alive to us
  ScriptedPeer behind(node, "b", 8, "inproc:b");
  auto heartbeat = [&](bool hears_a) {
    v1::GossipFrame f;
    ToProto({{a, 5}}, f.mutable_heartbeat()->mutable_applied());
    v1::Member* listed = f.mutable_heartbeat()->add_members();
    listed->set_node_id("a");
    listed->set_incarnation(7);
    listed->set_address("inproc:a");
    listed->set_heard(hears_a);
    return f;
  };
  auto resyncs = [&] {
    int n = 0;
    for (const auto& frame : behind.link().sent()) n += frame->has_resync();
    return n;
  };
  // Both speak every heartbeat interval (neither is ever silent long
  // enough to be marked dead), b saying whether it hears a.
  auto both_speak = [&](bool b_hears_a) {
    v1::GossipFrame alive;
    alive.mutable_heartbeat()->set_local_steps(1);
    origin.Send(alive);
    behind.Send(heartbeat(b_hears_a));
  };
  // 50 anti-entropy rounds, well past a failure timeout (400 ms) of b's coming.
  StepUntil(
      c, clock,
      [&] {
        both_speak(/*b_hears_a=*/true);
        return false;
      },
      milliseconds(1000));
  EXPECT_EQ(resyncs(), 0) << "told to re-join though a serves it";
  // b stops hearing a: now we are its only way, and the log cannot serve it.
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        both_speak(/*b_hears_a=*/false);
        return resyncs() == 1;
      },
      milliseconds(100)));
  EXPECT_TRUE(SeesAs(c, 0, "a", "alive")) << "a lived: the re-join is for b's not hearing it";
}

// A re-join that failed goes to another live member next; after a snapshot
// that lacked our own messages (our log let them go once every member alive
// then had them), only to one whose vector holds them all.
TEST(GossipNode, AFailedRejoinGoesToAMemberThatHoldsOurMessages) {
  Nodes c(1);
  c.Start();
  c.Publish(0, 1, 3);
  GossipNode* node = c.node(0);
  ScriptedPeer behind(node, "a", 7, "inproc:a");
  ScriptedPeer holder(node, "b", 8, "inproc:b");
  // Both have a's messages that we lack (a told us it keeps from 5).
  auto heartbeat = [](uint64_t our_seq) {
    v1::GossipFrame f;
    ToProto({{OriginKey{"n0", 1000}, our_seq}, {OriginKey{"a", 7}, 6}},
            f.mutable_heartbeat()->mutable_applied());
    return f;
  };
  behind.Send(heartbeat(1));
  holder.Send(heartbeat(2));  // not all three of ours yet
  v1::GossipFrame resync;
  resync.mutable_resync()->mutable_origin()->set_node_id("a");
  resync.mutable_resync()->mutable_origin()->set_incarnation(7);
  resync.mutable_resync()->set_first_retained_seq(5);
  behind.Send(resync);
  // Both have a's messages; the sender is asked last.
  ASSERT_TRUE(Eventually([&] { return node->ResyncSource() == "inproc:b"; }));
  // Nobody holds all our messages: nowhere better to go.
  EXPECT_FALSE(node->ResyncFailed("inproc:b", /*need_our_messages=*/true));
  EXPECT_EQ(node->ResyncSource(), "inproc:b");
  // A source that did not answer: another that has what we lack will do.
  EXPECT_TRUE(node->ResyncFailed("inproc:b", /*need_our_messages=*/false));
  EXPECT_EQ(node->ResyncSource(), "inproc:a");
  // Once b holds all three, a snapshot lacking them sends us there.
  holder.Send(heartbeat(3));
  ASSERT_TRUE(Eventually([&] {
    v1::NodeStatus s;
    node->FillStatus(&s, false);
    for (const auto& m : s.members()) {
      if (m.node_id() == "b") return m.lag() == 0;  // it applied all of ours
    }
    return false;
  }));
  EXPECT_TRUE(node->ResyncFailed("inproc:a", /*need_our_messages=*/true));
  EXPECT_EQ(node->ResyncSource(), "inproc:b");
}

// A ResyncRequired says its sender no longer holds messages of an origin
// that we lack. From a member with the token, anyone can say it, about
// anyone: it made every worker re-join from a snapshot of the liar, whose
// refusal of the snapshot call then stopped them (reckon-attacker). It is
// believed only where a re-join can bring what we lack: not about a live
// member's current incarnation from anyone but that member (it serves its
// own messages), and only from a member whose vector says it has applied
// the origin that far (others first, the sender last; an origin always has
// its own messages). A source that refuses is not asked again; with none
// left the re-join is dropped. Each belief declined is counted.
TEST(GossipNode, AResyncRequiredIsBelievedOnlyWhereARejoinCanBringWhatWeLack) {
  Nodes c(1);
  c.Start();
  GossipNode* node = c.node(0);
  ScriptedPeer a(node, "a", 7, "inproc:a");
  ScriptedPeer b(node, "b", 8, "inproc:b");
  ScriptedPeer mallory(node, "mallory", 9, "inproc:mallory");
  auto resync = [](const std::string& id, uint64_t incarnation, uint64_t first) {
    v1::GossipFrame f;
    f.mutable_resync()->mutable_origin()->set_node_id(id);
    f.mutable_resync()->mutable_origin()->set_incarnation(incarnation);
    f.mutable_resync()->set_first_retained_seq(first);
    return f;
  };
  auto claims = [](const OriginKey& origin, uint64_t seq) {
    v1::GossipFrame f;
    ToProto({{origin, seq}}, f.mutable_heartbeat()->mutable_applied());
    return f;
  };
  auto ignored = [&] { return node->counters().resyncs_ignored(); };
  // About a live member, from another: a serves its own. About this node's
  // own origin: it has every message of its own.
  mallory.Send(resync("a", 7, 5));
  mallory.Send(resync("n0", 1000, uint64_t{1} << 60));
  ASSERT_TRUE(Eventually([&] { return ignored() == 2; }));
  EXPECT_FALSE(node->ResyncSource().has_value());
  // About an origin nobody has applied that far.
  const OriginKey ghost{"ghost", 1};
  mallory.Send(resync("ghost", 1, 5));
  ASSERT_TRUE(Eventually([&] { return ignored() == 3; }));
  EXPECT_FALSE(node->ResyncSource().has_value());
  // The liar alone claims it: asked, it refuses, and the re-join is dropped.
  mallory.Send(claims(ghost, 10));
  mallory.Send(resync("ghost", 1, 5));
  ASSERT_TRUE(Eventually([&] { return node->ResyncSource() == "inproc:mallory"; }));
  EXPECT_TRUE(node->ResyncFailed("inproc:mallory", /*need_our_messages=*/false, /*refused=*/true));
  EXPECT_FALSE(node->ResyncSource().has_value());
  EXPECT_EQ(ignored(), 4u);
  // b has it too: b is asked, not the sender.
  b.Send(claims(ghost, 6));
  mallory.Send(resync("ghost", 1, 5));
  ASSERT_TRUE(Eventually([&] { return node->ResyncSource() == "inproc:b"; }));
  // b does not answer: the sender is the other that has it; it refuses, and
  // b is asked again; b refuses too: none left.
  EXPECT_TRUE(node->ResyncFailed("inproc:b", /*need_our_messages=*/false));
  EXPECT_EQ(node->ResyncSource(), "inproc:mallory");
  EXPECT_TRUE(node->ResyncFailed("inproc:mallory", false, /*refused=*/true));
  EXPECT_EQ(node->ResyncSource(), "inproc:b");
  EXPECT_TRUE(node->ResyncFailed("inproc:b", false, /*refused=*/true));
  EXPECT_FALSE(node->ResyncSource().has_value());
  EXPECT_EQ(ignored(), 5u);
  // An origin about itself: its own messages are its to serve.
  a.Send(resync("a", 7, 5));
  ASSERT_TRUE(Eventually([&] { return node->ResyncSource() == "inproc:a"; }));
  EXPECT_EQ(ignored(), 5u);
  // It does not answer: asked again while it is a live member, and the
  // re-join dropped once it is dead (its address was junk, say).
  EXPECT_FALSE(node->ResyncFailed("inproc:a", /*need_our_messages=*/false));
  EXPECT_EQ(node->ResyncSource(), "inproc:a");
  a.Close();
  ASSERT_TRUE(Eventually([&] {
    node->ResyncFailed("inproc:a", false);
    return !node->ResyncSource().has_value();
  }));
  EXPECT_EQ(ignored(), 6u);
}

// Our own messages stay in our log while a member that has not applied
// them is dead: it may come back (a member marked dead under load, a healed
// partition), and we are the one node sure to hold them. Once every live
// member had them, they used to go after the retention time; the member then
// had to re-join, and a snapshot lacking them could not be installed by us.
TEST(GossipNode, OwnMessagesStayLoggedForADeadMemberThatLacksThem) {
  ManualClock clock;
  Nodes c(3, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); });
  auto step_until = [&](const std::function<bool()>& done, milliseconds limit) {
    return StepUntil(c, clock, done, limit, milliseconds(100));
  };
  c.Start();
  ASSERT_TRUE(step_until([&] { return AllAliveNow(c); }, seconds(5)));
  c.net().Partition({{c.node(0), c.node(1)}, {c.node(2)}});
  ASSERT_TRUE(step_until([&] { return SeesAs(c, 0, "n2", "dead"); }, seconds(5)));
  c.Publish(0, 1, 5);
  const OriginKey n0{"n0", 1000};
  ASSERT_TRUE(step_until([&] { return SeqOf(c.node(1)->Applied(), n0) == 5; }, seconds(5)));
  step_until([] { return false; }, milliseconds(1500));  // past the retention (1 s here)
  v1::NodeStatus s;
  c.node(0)->FillStatus(&s, false);
  EXPECT_GE(s.log_messages(), 5u) << s.DebugString();
  c.net().Heal();
  ASSERT_TRUE(step_until([&] { return SeqOf(c.node(2)->Applied(), n0) == 5; }, seconds(10)))
      << VersionJson(c.node(2)->Applied());
  EXPECT_EQ(c.node(2)->counters().snapshots_loaded(), 0u);
}

// A member behind on an origin whose messages have all left our log (it was
// dead when they did, and their origin is gone) is told to re-join: with
// nothing retained there was once nothing to plan, and it never caught up.
TEST(GossipNode, MemberBehindOnAnOriginNoLogHoldsIsToldToRejoin) {
  ManualClock clock;
  Nodes c(3, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); });
  auto step_until = [&](const std::function<bool()>& done, milliseconds limit) {
    return StepUntil(c, clock, done, limit, milliseconds(100));
  };
  c.Start();
  ASSERT_TRUE(step_until([&] { return AllAliveNow(c); }, seconds(5)));
  c.net().Partition({{c.node(0), c.node(1)}, {c.node(2)}});
  c.Publish(1, 1, 5);
  const OriginKey n1{"n1", 1001};
  ASSERT_TRUE(step_until([&] { return SeqOf(c.node(0)->Applied(), n1) == 5; }, seconds(5)));
  c.node(1)->Stop(/*leave=*/true, milliseconds(100));    // n1 is gone for good
  step_until([] { return false; }, milliseconds(1500));  // past the retention (1 s)
  v1::NodeStatus s;
  c.node(0)->FillStatus(&s, false);
  ASSERT_EQ(s.log_messages(), 0u) << "n0 still holds n1's messages: nothing to test";
  c.net().Heal();
  EXPECT_TRUE(step_until([&] { return c.node(2)->ResyncSource() == "inproc:n0"; }, seconds(10)))
      << VersionJson(c.node(2)->Applied());
}

// Backpressure: while our own messages not yet applied by a live peer are
// over the cap, the training thread waits; it goes on once the peer's
// heartbeat shows them applied (a round trip at least), and the wait is
// counted. Alone, or under the cap, it never waits.
TEST(GossipNode, TrainingWaitsWhileItsBacklogIsOverTheCap) {
  Nodes c(2, milliseconds(300), [](int, NodeOptions& o) {
    o.failure_timeout = seconds(3);
    o.max_backlog_bytes = 1;
  });
  EXPECT_TRUE(c.node(0)->WaitWhileBacklogged(Clock::now()));  // no peer yet: nothing owed
  c.Start();
  ASSERT_TRUE(PeerAlive(c));
  c.Publish(0, 1, 3);
  EXPECT_GT(c.node(0)->OwnBacklogBytes(), 0u);
  const auto start = Clock::now();
  ASSERT_TRUE(c.node(0)->WaitWhileBacklogged(start + seconds(20)));
  const auto waited = Clock::now() - start;
  EXPECT_EQ(SeqOf(c.node(1)->Applied(), {"n0", 1000}), 3u);
  EXPECT_EQ(c.node(0)->OwnBacklogBytes(), 0u);
  EXPECT_GE(waited, milliseconds(600));  // out and back over a 300 ms link
  EXPECT_GE(c.node(0)->counters().backpressure_ms(), 600u);
}

// The default cap is a share of the log (log_byte_cap / (2 x members)):
// with 1,000-byte-ish messages and a 1 MiB log nothing waits.
TEST(GossipNode, DefaultBacklogCapIsAShareOfTheLog) {
  ManualClock clock;
  Nodes c(
      2, milliseconds(300), [](int, NodeOptions& o) { o.log_byte_cap = 1 << 20; }, {}, &clock);
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
  c.Publish(0, 1, 3);
  EXPECT_GT(c.node(0)->OwnBacklogBytes(), 0u);
  EXPECT_LT(c.node(0)->OwnBacklogBytes(), size_t{1 << 20} / 4);
  EXPECT_TRUE(c.node(0)->WaitWhileBacklogged(Clock::now()));
  EXPECT_EQ(c.node(0)->counters().backpressure_ms(), 0u);
}

// What the receiver drops on an intact stream (here: early arrivals past a
// one-slot buffer, made by a sender that reorders) is seen as lost once the
// receiver's heartbeat shows it processed the frame, and is sent again.
// Most repairs here are resends; the rest are first copies that waited for
// anti-entropy (a fresh message is pushed only in order after the last one
// the peer got), at most one per message.
TEST(GossipNode, MessageDroppedOnIntactStreamIsRepaired) {
  FaultOptions reorder;
  reorder.delay_probability = 0.5;
  reorder.max_delay_ms = 30;
  Nodes c(2, milliseconds(0),
          [](int i, NodeOptions& o) { o.early_arrival_cap = i == 1 ? 1 : 4096; }, {{0, reorder}});
  c.Start();
  c.Publish(0, 1, 100, milliseconds(2));
  EXPECT_TRUE(Eventually([&] {
    return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 100;
  })) << VersionJson(c.node(1)->Applied());
  EXPECT_GT(c.node(1)->counters().early_dropped(), 0u);  // there were losses...
  EXPECT_GT(c.node(0)->counters().repairs_sent(), 0u);   // ...and repairs
  const GossipNode::Counters n0 = c.node(0)->counters();
  EXPECT_GT(n0.repairs_resent(), 0u);
  EXPECT_LE(n0.repairs_sent() - n0.repairs_resent(), 100u) << n0.repairs_sent() << " repairs";
  EXPECT_EQ(c.node(1)->counters().updates_applied(), 100u);
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
  c.node(0)->NoteJoiner("late", 42);
  const std::vector<absl::Status> held = QuiesceOn(c, clock, milliseconds(500));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(held[i].code(), absl::StatusCode::kDeadlineExceeded) << i << ": " << held[i];
  }
  EXPECT_NE(held[0].message().find("late is joining"), std::string::npos) << held[0];
  v1::NodeStatus status;
  c.node(0)->FillStatus(&status);
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
  EXPECT_EQ(c.node(0)->MirrorHash(), c.node(1)->MirrorHash());
}

// A node whose every message is slow to apply (a large model, a loaded
// machine: here 10 ms each, by the on_accept hook) falls behind a peer that
// publishes fast. It is slow, not dead: it keeps sending heartbeats while
// it works through the backlog, and counts its peer's frames as they
// arrive, not as it gets to them; neither side marks the other dead (which
// let the three others of a 4-worker onebit cluster end without the slow
// one, and left it training alone), and both end identical.
TEST(GossipNode, NodeBehindOnABacklogIsSlowNotDead) {
  Nodes c(2, milliseconds(0), [](int i, NodeOptions& o) {
    if (i == 0) {
      o.on_accept = [](const OriginKey&, const v1::Update&) {
        std::this_thread::sleep_for(milliseconds(10));
      };
    }
  });
  c.Start();
  ASSERT_TRUE(Eventually([&] {
    v1::NodeStatus s;
    c.node(1)->FillStatus(&s);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  }));
  // 150 messages at once: 1.5 s of work for n0, almost four failure timeouts.
  c.Publish(1, 1, 150);
  ASSERT_TRUE(Eventually(
      [&] {
        return SeqOf(c.node(0)->Applied(), {"n1", 1001}) == 150;
      },
      seconds(30)));
  for (int i = 0; i < 2; ++i) EXPECT_EQ(c.node(i)->counters().members_failed(), 0u) << "n" << i;
  for (const absl::Status& s : c.Quiesce()) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.node(0)->MirrorHash(), c.node(1)->MirrorHash());
}

// A peer announcing more members than the cap (invented, or a seed list
// gone wrong) cannot grow the member table: the extra ones are refused and
// counted, and the cluster within the cap works on.
TEST(GossipNode, MembersPastTheCapAreRefusedAndCounted) {
  Nodes c(4, milliseconds(0), [](int, NodeOptions& o) { o.max_members = 2; });
  c.Start();
  for (int i = 0; i < 4; ++i) c.Publish(i, 1, 3);
  ASSERT_TRUE(Eventually([&] {
    uint64_t refused = 0;
    for (int i = 0; i < 4; ++i) refused += c.node(i)->counters().members_refused();
    return refused > 0;
  }));
  for (int i = 0; i < 4; ++i) {
    v1::NodeStatus s;
    c.node(i)->FillStatus(&s);
    EXPECT_LE(s.members_size(), 2) << i;
    // A member past the cap is not a peer of another cluster.
    EXPECT_EQ(c.node(i)->counters().peers_refused(), 0u) << i;
  }
}

// Signed updates travel with their signatures, and certificates travel
// ahead of them: a member that never met an origin (cut off while it
// lived) verifies its messages when another member relays them, because the
// relay first passes on the origin's certificate.
TEST(GossipNode, RelayedUpdatesOfAnOriginNeverMetAreVerified) {
  const KeyAndCertificate ca = *MakeCertificateAuthority("test CA", 1);
  std::vector<TlsConfig> tls;
  for (int i = 0; i < 3; ++i) {
    const KeyAndCertificate cert = *IssueCertificate(ca, absl::StrCat("n", i), {}, 1);
    tls.push_back(*CheckTls({ca.cert_pem, cert.cert_pem, cert.key_pem, ""}, "test"));
  }
  ManualClock clock;
  Nodes c(
      3, milliseconds(0), [&](int i, NodeOptions& o) { o.tls = tls[i]; }, {}, &clock);
  c.net().Partition({{c.node(0), c.node(1)}, {c.node(2)}});
  c.Start();
  c.Publish(0, 1, 10);
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 10;
      },
      seconds(5)));
  c.node(0)->Stop(/*leave=*/false, milliseconds(0));  // it dies before n2 ever met it
  c.net().Heal();
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(2)->Applied(), {"n0", 1000}) == 10;
      },
      seconds(10)))
      << VersionJson(c.node(2)->Applied());
  EXPECT_EQ(c.node(2)->counters().signature_errors(), 0u);
  EXPECT_EQ(c.node(1)->counters().signature_errors(), 0u);
  EXPECT_EQ(c.node(2)->MirrorHash(), c.node(1)->MirrorHash());
}

// Lanes (server/lanes.h) with the size floor at 0, so that the test's small
// Updates count as big: once the first goes to a member, three lanes open
// to it, and the Updates go round the stream and the lanes. Every message
// is applied once, in order per origin, and nothing is taken for lost:
// the loss evidence counts each link's frames. One stream per pair from the
// start (SeedOnlyLaterNodes): under load, an Update sent on the stream a pair
// dropped (both had dialed) was lost and repaired, correctly, and counted.
TEST(GossipNode, BigUpdatesGoOnLanesAndArriveExactlyOnce) {
  Nodes c(3, milliseconds(2), [](int i, NodeOptions& o) {
    o.lane_min_bytes = 0;
    SeedOnlyLaterNodes(i, 3, o);
  });
  c.Start();
  ASSERT_TRUE(AllAlive(c));
  std::vector<std::thread> publishers;
  for (int i = 0; i < 3; ++i) {
    publishers.emplace_back([&c, i] { c.Publish(i, 1, 200, milliseconds(3)); });
  }
  for (auto& p : publishers) p.join();
  for (const absl::Status& s : c.Quiesce()) EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    const GossipNode::Counters n = c.node(i)->counters();
    EXPECT_EQ(n.updates_applied(), 400u) << i;
    EXPECT_EQ(n.duplicates_dropped(), 0u) << i;
    EXPECT_EQ(n.repairs_sent(), 0u) << i;
    // Sent 2 x 200, round the stream and three lanes once these were up:
    // about three in four on lanes.
    EXPECT_GE(n.lane_update_frames_sent(), 250u) << i;
    EXPECT_LT(n.lane_update_frames_sent(), 400u) << i;
    EXPECT_EQ(c.node(i)->MirrorHash(), c.node(0)->MirrorHash()) << i;
    v1::NodeStatus s;
    c.node(i)->FillStatus(&s, false);
    for (const v1::MemberStatus& m : s.members()) {
      EXPECT_EQ(m.lanes_out(), 3u) << i << " to " << m.node_id();
      EXPECT_EQ(m.lanes_in(), 3u) << i << " from " << m.node_id();
    }
  }
}

// Updates under the floor (the default 1 MiB: threshold-coded messages)
// open no lane.
TEST(GossipNode, SmallUpdatesOpenNoLanes) {
  ManualClock clock;
  Nodes c(2, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); });
  c.Start();
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        v1::NodeStatus s;
        c.node(0)->FillStatus(&s);
        return s.members_size() == 1 && s.members(0).state() == "alive";
      },
      milliseconds(2000)));
  c.Publish(0, 1, 50, milliseconds(2));
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 50; }));
  // Ten ticks (lanes are dialed at a tick) on the nodes' clock.
  StepUntil(
      c, clock, [] { return false; }, milliseconds(200), milliseconds(20));
  EXPECT_EQ(c.node(0)->counters().lane_update_frames_sent(), 0u);
  v1::NodeStatus s;
  c.node(1)->FillStatus(&s, false);
  ASSERT_EQ(s.members_size(), 1);
  EXPECT_EQ(s.members(0).lanes_in(), 0u);
}

}  // namespace
}  // namespace reckon::server
