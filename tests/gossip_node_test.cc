// The gossip node's protocol logic over in-process links (server/inproc_link.h):
// real GossipNodes, real frames, no sockets or processes. Each test's
// timeouts are a few heartbeats; the assertions wait with generous deadlines.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "server/fault_link.h"
#include "server/inproc_link.h"
#include "server/node.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kParams = 1000;
constexpr int kFractionBits = 32;
constexpr int64_t kStep = int64_t{1} << 24;

std::string Address(int i) { return absl::StrCat("inproc:n", i); }

v1::ClusterFingerprint Fingerprint() {
  v1::ClusterFingerprint f;
  f.set_model("test");
  f.set_fraction_bits(kFractionBits);
  f.set_codec(v1::CODEC_THRESHOLD_RICE);
  f.set_seed(1);
  f.set_protocol_version(1);
  f.set_param_count(kParams);
  return f;
}

NodeOptions Options(int i, int n) {
  NodeOptions o;
  o.node_id = absl::StrCat("n", i);
  o.incarnation = 1000 + i;
  o.listen_address = Address(i);
  for (int j = 0; j < n; ++j) {
    if (j != i) o.seeds.push_back(Address(j));
  }
  o.fingerprint = Fingerprint();
  o.heartbeat_interval = milliseconds(20);
  o.failure_timeout = milliseconds(400);
  o.initial_backoff = milliseconds(20);
  o.max_backoff = milliseconds(200);
  o.repair_timeout = milliseconds(100);
  o.log_min_retention = milliseconds(1000);
  return o;
}

// One Update of `origin`: `count` random distinct indices, random signs.
struct Message {
  v1::Update update;
  codec::DecodedUpdate decoded;
};
Message MakeMessage(const NodeOptions& origin, uint64_t seq, std::mt19937_64& rng, int count = 20) {
  std::vector<uint32_t> words;
  std::vector<bool> used(kParams);
  while (static_cast<int>(words.size()) < count) {
    const uint32_t index = static_cast<uint32_t>(rng() % kParams);
    if (used[index]) continue;
    used[index] = true;
    words.push_back(index);
  }
  std::sort(words.begin(), words.end());
  for (uint32_t& w : words) w |= static_cast<uint32_t>(rng() & 1) << 31;
  Message m;
  m.update.mutable_origin()->set_node_id(origin.node_id);
  m.update.mutable_origin()->set_incarnation(origin.incarnation);
  m.update.set_seq(seq);
  EXPECT_TRUE(
      codec::EncodeThresholdUpdate(words, kStep, kParams, v1::CODEC_THRESHOLD_RICE, &m.update).ok());
  EXPECT_TRUE(codec::DecodeUpdate(m.update, &m.decoded).ok());
  return m;
}

std::vector<int64_t> InitialWeights() {
  std::vector<int64_t> w(kParams);
  for (uint64_t i = 0; i < kParams; ++i) w[i] = static_cast<int64_t>(i * 7919 % 1000) << 20;
  return w;
}

// N nodes on one in-process network.
class Nodes {
 public:
  explicit Nodes(int n, milliseconds latency = milliseconds(0),
                 const std::function<void(int, NodeOptions&)>& adjust = nullptr,
                 std::map<int, FaultOptions> faults = {})
      : net_(latency), fault_options_(std::move(faults)) {
    for (int i = 0; i < n; ++i) {
      options_.push_back(Options(i, n));
      if (adjust) adjust(i, options_.back());
      absl::StatusOr<std::unique_ptr<GossipNode>> node =
          GossipNode::Create(options_.back(), initial_[i % initial_.size()], kFractionBits);
      EXPECT_TRUE(node.ok()) << node.status();
      nodes_.push_back(*std::move(node));
    }
  }
  ~Nodes() { StopAll(); }

  // Node i starts from `weights` instead (call before Start).
  void SetInitial(int i, std::vector<int64_t> weights) {
    absl::StatusOr<std::unique_ptr<GossipNode>> node =
        GossipNode::Create(options_[i], weights, kFractionBits);
    ASSERT_TRUE(node.ok());
    nodes_[i] = *std::move(node);
  }
  // Nodes given faults talk through a FaultInjector (server/fault_link.h).
  void Start() {
    for (size_t i = 0; i < nodes_.size(); ++i) {
      LinkEvents* events = node(i);
      if (auto f = fault_options_.find(static_cast<int>(i)); f != fault_options_.end()) {
        injectors_[i] = std::make_unique<FaultInjector>(
            f->second, OriginKey{options_[i].node_id, options_[i].incarnation}, node(i), i);
        events = injectors_[i].get();
      }
      events_.push_back(events);
      net_.Listen(options_[i].listen_address, node(i), events);
    }
    for (size_t i = 0; i < nodes_.size(); ++i) {
      Dialer dialer = net_.MakeDialer(node(i), events_[i]);
      if (injectors_.count(i)) dialer = injectors_[i]->Wrap(std::move(dialer));
      node(i)->Start(std::move(dialer));
    }
  }
  void StopAll() {
    for (auto& n : nodes_) n->Stop(/*leave=*/true, milliseconds(100));
  }

  GossipNode* node(size_t i) { return nodes_[i].get(); }
  const NodeOptions& options(size_t i) const { return options_[i]; }
  InProcNetwork& net() { return net_; }
  int size() const { return static_cast<int>(nodes_.size()); }

  // Node i publishes `count` messages (seq from `first`), `gap` apart.
  void Publish(int i, uint64_t first, int count, milliseconds gap = milliseconds(0)) {
    std::mt19937_64 rng(first * 31 + static_cast<uint64_t>(i));
    for (int k = 0; k < count; ++k) {
      Message m = MakeMessage(options_[i], first + k, rng);
      ASSERT_TRUE(node(i)->Publish(m.update, m.decoded).ok());
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
  }

  // Every node: training done, then WaitQuiescent (concurrently, as each
  // worker does). Returns each node's result.
  std::vector<absl::Status> Quiesce(seconds timeout = seconds(20)) {
    std::vector<absl::Status> results(nodes_.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      threads.emplace_back([&, i] {
        node(i)->SetTrainingDone(0);
        results[i] = node(i)->WaitQuiescent(Clock::now() + timeout,
                                            [](Received&) { return absl::OkStatus(); });
      });
    }
    for (auto& t : threads) t.join();
    return results;
  }

 private:
  InProcNetwork net_;
  std::map<int, FaultOptions> fault_options_;
  std::map<size_t, std::unique_ptr<FaultInjector>> injectors_;  // outlive the nodes
  std::vector<LinkEvents*> events_;
  std::vector<std::vector<int64_t>> initial_ = {InitialWeights()};
  std::vector<NodeOptions> options_;
  std::vector<std::unique_ptr<GossipNode>> nodes_;
};

bool Eventually(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

TEST(GossipNode, ThreeNodesAgreeAtQuiescence) {
  Nodes c(3);
  c.Start();
  for (int i = 0; i < 3; ++i) c.Publish(i, 1, 50);
  for (const absl::Status& s : c.Quiesce()) EXPECT_TRUE(s.ok()) << s;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c.node(i)->MirrorHash(), c.node(0)->MirrorHash()) << i;
    EXPECT_TRUE(SameVersions(c.node(i)->Applied(), c.node(0)->Applied())) << i;
    EXPECT_EQ(c.node(i)->counters().updates_applied, 100u) << i;
    EXPECT_EQ(SeqOf(c.node(i)->Applied(), {"n2", 1002}), 50u);
  }
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
  EXPECT_EQ(c.node(0)->counters().updates_applied, 0u);
}

// A dial that is never answered (the peer accepted nothing: a partition, a
// stopped process) is abandoned after the failure timeout and dialed again,
// so the pair connects once the network heals.
TEST(GossipNode, UnansweredDialIsRetriedAfterHealing) {
  Nodes c(2);
  c.net().Partition({{c.node(0)}, {c.node(1)}});
  c.Start();
  std::this_thread::sleep_for(milliseconds(1500));  // > 2 dial deadlines
  c.net().Heal();
  c.Publish(0, 1, 5);
  EXPECT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 5; }))
      << VersionJson(c.node(1)->Applied());
}

// A slow but intact link (latency well above the repair timeout) loses
// nothing, so nothing may be sent twice: repairs go only where a message was
// lost. (Before: every lag past the repair timeout re-sent all of it.)
TEST(GossipNode, SlowIntactLinkGetsNoRepairs) {
  // 400 ms one way; repair timeout 100 ms; a failure timeout the link allows.
  Nodes c(2, milliseconds(400), [](int, NodeOptions& o) { o.failure_timeout = seconds(2); });
  c.Start();
  ASSERT_TRUE(Eventually([&] {
    v1::NodeStatus s;
    c.node(0)->FillStatus(&s);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  }));
  // Both dialed at once: the pair settles on one of the two streams a round
  // trip later, and what went out on the other meanwhile is really lost.
  std::this_thread::sleep_for(milliseconds(1200));
  const uint64_t repairs_before = c.node(0)->counters().repairs_sent;
  c.Publish(0, 1, 200, milliseconds(5));
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 200; }));
  std::this_thread::sleep_for(milliseconds(1000));  // several heartbeats more
  EXPECT_EQ(repairs_before, 0u);
  EXPECT_EQ(c.node(0)->counters().repairs_sent, 0u);
  EXPECT_EQ(c.node(1)->counters().duplicates_dropped, 0u);
  EXPECT_EQ(c.net().counters().update_frames, 200u);
}

// What the receiver drops on an intact stream (here: early arrivals past a
// one-slot buffer, made by a sender that reorders) is seen as lost once the
// receiver's heartbeat shows it processed the frame, and is sent again.
TEST(GossipNode, MessageDroppedOnIntactStreamIsRepaired) {
  FaultOptions reorder;
  reorder.delay_probability = 0.5;
  reorder.max_delay_ms = 30;
  Nodes c(
      2, milliseconds(0), [](int i, NodeOptions& o) { o.early_arrival_cap = i == 1 ? 1 : 4096; },
      {{0, reorder}});
  c.Start();
  c.Publish(0, 1, 100, milliseconds(2));
  EXPECT_TRUE(Eventually([&] { return SeqOf(c.node(1)->Applied(), {"n0", 1000}) == 100; }))
      << VersionJson(c.node(1)->Applied());
  EXPECT_GT(c.node(1)->counters().early_dropped, 0u);  // there were losses...
  EXPECT_GT(c.node(0)->counters().repairs_sent, 0u);   // ...and repairs
  EXPECT_EQ(c.node(1)->counters().updates_applied, 100u);
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
    for (int i = 0; i < 4; ++i) refused += c.node(i)->counters().members_refused;
    return refused > 0;
  }));
  for (int i = 0; i < 4; ++i) {
    v1::NodeStatus s;
    c.node(i)->FillStatus(&s);
    EXPECT_LE(s.members_size(), 2) << i;
  }
}

}  // namespace
}  // namespace reckon::server
