// What the tests of the whole gossip node (tests/node/) share: a training
// replica beside a node without a mirror, origins, liveness checks, a
// receiving node's outcome, a member behind a snapshot's cut. Over
// in-process links (server/inproc_link.h): real GossipNodes, real frames,
// no sockets or processes. Each test's timeouts are a few heartbeats. Tests
// about protocol time run the nodes and the network's latencies on a
// ManualClock and step it (StepUntil), a millisecond of real time a step;
// those left on the steady clock measure real time (backpressure), real
// slowness (a node slow to apply) or real reordering (the fault injector),
// and wait with generous deadlines.
#ifndef RECKON_TESTS_NODE_NODE_TEST_UTIL_H_
#define RECKON_TESTS_NODE_NODE_TEST_UTIL_H_

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
#include "server/update_signature.h"
#include "tests/inproc_cluster.h"
#include "tests/scripted_peer.h"

namespace reckon::server::testing {

using std::chrono::milliseconds;
using std::chrono::seconds;

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
      node->training().OfferTrainingCut(*got.cut, got.checksum, Weights());
      ++cuts_offered_;
    }
    return absl::OkStatus();
  }
  // One step boundary: what arrived is taken and applied.
  absl::Status Step(GossipNode* node) {
    Received got = node->training().TakeReceived();
    return Drain(node, got);
  }
  void Publish(GossipNode* node, const NodeOptions& o, uint64_t first, int count) {
    std::mt19937_64 rng(first * 31 + o.incarnation);
    for (int k = 0; k < count; ++k) {
      Message m = MakeMessage(o, first + k, rng);
      ASSERT_TRUE(codec::ApplyDecoded(m.decoded, &replica_).ok());
      ASSERT_TRUE(node->training().Publish(m.update, m.decoded).ok());
    }
  }
  absl::Status Quiesce(GossipNode* node, milliseconds timeout) {
    node->training().SetTrainingDone(0);
    return node->training().WaitQuiescent(
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

inline void NoMirror(int, NodeOptions& o) { o.replica = NodeOptions::Replica::kTrainingThread; }

inline std::vector<absl::Status> QuiesceWithTrainingReplicas(Nodes& c,
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

// A slow but intact link (latency well above the repair timeout) loses
// nothing, so nothing may be sent twice: repairs go only where a message was
// lost. (Before: every lag past the repair timeout re-sent all of it.)
// Node 0 of a two-node cluster sees node 1 alive.
// The options MakeMessage reads of an origin (a scripted member's).
inline NodeOptions OriginOf(const std::string& node_id, uint64_t incarnation) {
  NodeOptions o;
  o.node_id = node_id;
  o.incarnation = incarnation;
  return o;
}

inline bool PeerAlive(Nodes& c) {
  return Eventually([&] {
    v1::NodeStatus s;
    c.node(0)->service().FillStatus(&s);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  });
}

// Every node sees every other alive, now.
inline bool AllAliveNow(Nodes& c) {
  for (int i = 0; i < c.size(); ++i) {
    v1::NodeStatus s;
    c.node(i)->service().FillStatus(&s, false);
    if (s.members_size() != c.size() - 1) return false;
    for (const auto& m : s.members()) {
      if (m.state() != "alive") return false;
    }
  }
  return true;
}
// ... within 10 s.
inline bool AllAlive(Nodes& c) {
  return Eventually([&] { return AllAliveNow(c); });
}

// Node `at` sees `peer` in `state` ("alive", "dead", ...), now.
inline bool SeesAs(Nodes& c, int at, const std::string& peer, const std::string& state) {
  v1::NodeStatus s;
  c.node(at)->service().FillStatus(&s, false);
  for (const auto& m : s.members()) {
    if (m.node_id() == peer) return m.state() == state;
  }
  return false;
}

inline void TreeOverlay(int, NodeOptions& o) { o.fingerprint.set_overlay(v1::GOSSIP_OVERLAY_TREE); }

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
inline void ShowEachNodeOtherOrigins(Nodes& c, int steps_each) {
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
inline void StartAndShowEachNodeOtherOrigins(Nodes& c, int steps_each) {
  c.Start();
  c.Publish(0, 1, 3);
  c.Publish(1, 1, 3);
  ShowEachNodeOtherOrigins(c, steps_each);
  ASSERT_TRUE(Eventually([&] {
    return c.node(0)->service().counters().origins_refused() > 0 &&
           c.node(1)->service().counters().origins_refused() > 0;
  }));
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

inline ReceiveOutcome Receive(int threads) {
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
  EXPECT_TRUE(Eventually([&] { return SeqOf(node->service().Applied(), OriginKey{"m", 3}) == 8; }));
  // The last duplicate is handled with or after seq 8's batch.
  member.SendUpdate(m[8].update);
  EXPECT_TRUE(Eventually([&] { return node->service().counters().duplicates_dropped() == 3; }))
      << node->service().counters().DebugString();
  ReceiveOutcome out;
  out.hash = node->service().ReplicaHash();
  for (const auto& u : node->training().TakeReceived().updates) out.accepted_seqs.push_back(u->seq);
  const GossipNode::Counters counters = node->service().counters();
  out.decode_errors = counters.decode_errors();
  out.duplicates_dropped = counters.duplicates_dropped();
  out.updates_applied = counters.updates_applied();
  return out;
}

// A node that joined from a snapshot holds nothing of an origin before its
// cut. A member behind that cut used to be told by it to re-join from a
// snapshot (RejoinRequired), though the origin itself is alive, heard by
// that member, and serves what it lacks from its own log: a spurious
// second snapshot (seen as GossipCluster.WorkersBeyondStartWorkers...
// loading two). Telling a member to re-join for a live origin it hears is
// the origin's call; for our own messages, or an origin it does not hear,
// it is still ours.
// The node joined from a snapshot (the initial weights) at `origin`'s `seq`:
// nothing of that origin in its log.
inline void JoinFromASnapshotAt(GossipNode* node, const OriginKey& origin, uint64_t seq) {
  ASSERT_TRUE(node->InstallSnapshot(
                      InitialWeights(), {{origin, seq}},
                      codec::WeightChecksum(Fingerprint().seed()).Of(InitialWeights()), "test")
                  .ok());
}

// One node (failure timeout 3 s, on a ManualClock) that joined from a
// snapshot at seq 10 of origin a; b comes, behind that cut (a:5), saying
// nothing of whom it hears. Step(by): b speaks (and a, when it is
// `reached`: alive to the node), then the clock moves one heartbeat
// interval `by`. Rejoins(): what b was told to re-join for.
// Waits until `node` has received `bytes` frame bytes in all and handled
// the frames that carried them. The node counts a frame's bytes, without
// its lock, as it starts to handle it (server/node_counters.h): a count seen
// is not yet a frame handled. FillStatus takes the lock the node holds for
// a whole batch, so it returns once the batch that counted them is done.
inline bool HandledBytes(GossipNode* node, uint64_t bytes) {
  if (!Eventually([&] { return node->service().counters().bytes_received() >= bytes; }))
    return false;
  v1::NodeStatus ignored;
  node->service().FillStatus(&ignored, /*with_weight_hash=*/false);
  return true;
}

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
    // Both handshakes done at the clock's start (the node answers a Hello
    // with a heartbeat): a member's coming is when its Hello is handled.
    EXPECT_TRUE(Eventually([&] {
      return (!origin_ || !origin_->link().sent().empty()) && !newcomer_->link().sent().empty();
    }));
  }
  GossipNode* node() { return nodes_.node(0); }
  void Step(milliseconds by) {
    const uint64_t received = node()->service().counters().bytes_received();
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
    ASSERT_TRUE(HandledBytes(node(), received + sent));
    const size_t before = newcomer_->link().sent().size();
    clock_.Advance(by);
    ASSERT_TRUE(Eventually([&] { return newcomer_->link().sent().size() > before; }));
  }
  int Rejoins() {
    int n = 0;
    for (const auto& frame : newcomer_->link().sent()) n += frame->has_rejoin();
    return n;
  }

 private:
  ManualClock clock_;
  Nodes nodes_;
  const OriginKey a_{"a", 7};
  std::optional<ScriptedPeer> origin_, newcomer_;
};

}  // namespace reckon::server::testing

#endif  // RECKON_TESTS_NODE_NODE_TEST_UTIL_H_
