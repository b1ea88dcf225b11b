// N real GossipNodes on one in-process network (server/inproc_link.h), and
// the messages they publish: the fixture of the node tests. Timeouts are a
// few heartbeats; assertions step a ManualClock (StepUntil, QuiesceOn) or
// wait with generous deadlines (Eventually).
#ifndef RECKON_TESTS_INPROC_CLUSTER_H_
#define RECKON_TESTS_INPROC_CLUSTER_H_

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/fixed_point.h"
#include "codec/update_message.h"
#include "codec/weight_checksum.h"
#include "server/cluster_config.h"
#include "server/fault_link.h"
#include "server/inproc_link.h"
#include "server/node.h"

namespace reckon::server::testing {

using std::chrono::milliseconds;  // NOLINT: test fixture header
using std::chrono::seconds;       // NOLINT

constexpr uint64_t kParams = 1000;
constexpr int kFractionBits = 32;
constexpr int64_t kStep = int64_t{1} << 24;

inline std::string Address(int i) { return absl::StrCat("inproc:n", i); }

inline v1::ClusterFingerprint Fingerprint() {
  ClusterSpec spec;
  spec.model = "test";
  spec.param_count = kParams;
  spec.fraction_bits = kFractionBits;
  spec.seed = 1;
  return MakeFingerprint(spec);
}

inline NodeOptions Options(int i, int n) {
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

// A clock for NodeOptions::clock that stands still until the test moves
// it: a node on it ticks once per Advance (its next tick is then due) and
// never on its own, so a test steps through a 10 s timeout to the
// millisecond without sleeping. Events (frames, links) are handled as they
// come, whatever the clock says.
class ManualClock {
 public:
  Clock::time_point Now() const { return start_ + Clock::duration(offset_.load()); }
  void Advance(Clock::duration by) { offset_ += by.count(); }
  std::function<Clock::time_point()> Function() {
    return [this] { return Now(); };
  }

 private:
  const Clock::time_point start_ = Clock::now();
  std::atomic<Clock::rep> offset_{0};
};

// Node i seeds only the nodes after it, so a pair's ends do not both dial
// at the start. With every node seeding every other (Options), both ends
// dial at once and the pair keeps one of the two streams a round trip
// later: what went out on the other meanwhile is really lost and repaired.
// Tests that count repairs of a steady cluster use this instead of waiting.
// Not a guarantee with three or more: n2 may learn of n0 from n1 and dial
// it before n0's own dial lands, and those two cross the same way
// (GossipNode.OriginsQueuedStreamIsNotDoubledByRelays steps past it).
inline void SeedOnlyLaterNodes(int i, int n, NodeOptions& o) {
  o.seeds.clear();
  for (int j = i + 1; j < n; ++j) o.seeds.push_back(Address(j));
}

// One Update of `origin`: `count` random distinct indices, random signs, with
// its checksum contribution.
struct Message {
  v1::Update update;
  codec::DecodedUpdate decoded;
};
inline Message MakeMessage(const NodeOptions& origin, uint64_t seq, std::mt19937_64& rng,
                           int count = 20) {
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
      codec::EncodeThresholdUpdate(words, kStep, kParams, v1::CODEC_THRESHOLD_RICE, &m.update)
          .ok());
  EXPECT_TRUE(codec::DecodeUpdate(m.update, &m.decoded).ok());
  // What every receiver checks (a node's Publish sets it again itself).
  m.update.set_checksum_delta(
      codec::WeightChecksum(Fingerprint().seed()).OfUpdate(kStep, m.decoded.words));
  return m;
}

inline std::vector<int64_t> InitialWeights() {
  std::vector<int64_t> w(kParams);
  for (uint64_t i = 0; i < kParams; ++i) w[i] = static_cast<int64_t>(i * 7919 % 1000) << 20;
  return w;
}

// N nodes on one in-process network. With `clock`, every node and the
// network's latencies run on it (StepUntil moves it).
class Nodes {
 public:
  explicit Nodes(int n, milliseconds latency = milliseconds(0),
                 const std::function<void(int, NodeOptions&)>& adjust = nullptr,
                 std::map<int, FaultOptions> faults = {}, ManualClock* clock = nullptr)
      : net_(latency, clock ? clock->Function() : nullptr), fault_options_(std::move(faults)) {
    for (int i = 0; i < n; ++i) {
      options_.push_back(Options(i, n));
      if (clock) options_.back().clock = clock->Function();
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
      LinkEvents* events = &node(i)->service();
      if (auto f = fault_options_.find(static_cast<int>(i)); f != fault_options_.end()) {
        injectors_[i] = std::make_unique<FaultInjector>(
            f->second, OriginKey{options_[i].node_id, options_[i].incarnation}, &node(i)->service(),
            i);
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
      ASSERT_TRUE(node(i)->training().Publish(m.update, m.decoded).ok());
      if (gap.count() > 0) std::this_thread::sleep_for(gap);
    }
  }

  // Every node: training done, then WaitQuiescent (concurrently, as each
  // worker does). Returns each node's result.
  std::vector<absl::Status> Quiesce(milliseconds timeout = seconds(20)) {
    std::vector<absl::Status> results(nodes_.size());
    std::vector<std::thread> threads;
    for (size_t i = 0; i < nodes_.size(); ++i) {
      threads.emplace_back([&, i] {
        node(i)->training().SetTrainingDone(0);
        results[i] = node(i)->training().WaitQuiescent(Clock::now() + timeout,
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

// What a move of the clock made due, handled before the test looks: the
// network's frames due by now delivered (its delivery thread looks at the
// clock only every 2 ms, and on a loaded machine later), then every node
// idle (ServicePort::IdleForTesting) in two looks in a row that saw the
// same events arrive (a node that handled a frame may have sent another,
// with no latency, to a node already looked at). Without it a frame due at
// one step could be handled at a later one, as the machine's scheduler
// had it: a heartbeat landing 100 ms late read as a round trip of 12 steps
// instead of 9 to 11. Gives up at `give_up` (a node busy for real).
inline void SettleAfterStep(Nodes& c, Clock::time_point give_up) {
  std::vector<std::optional<uint64_t>> last;
  while (Clock::now() < give_up) {
    c.net().DeliverDue();
    std::vector<std::optional<uint64_t>> idle;
    bool all = true;
    for (int i = 0; i < c.size(); ++i) {
      idle.push_back(c.node(i)->service().IdleForTesting());
      all = all && idle.back().has_value();
    }
    if (all && idle == last) return;
    last = all ? std::move(idle) : std::vector<std::optional<uint64_t>>{};
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

// Moves `clock` (every node's NodeOptions::clock) one `step` at a time,
// each time waiting until every running node has ticked, until `done` or
// `limit` of protocol time has passed: time-driven tests of a cluster, with
// no sleep and no race with a loaded machine's scheduler. REQUIRES: `step`
// is at least every node's heartbeat interval (each step then ticks each
// node). A step costs about a millisecond (the node looks at an injected
// clock that often).
inline bool StepUntil(Nodes& c, ManualClock& clock, const std::function<bool()>& done,
                      milliseconds limit, milliseconds step = milliseconds(20)) {
  for (milliseconds passed{0}; passed <= limit; passed += step) {
    if (done()) return true;
    std::vector<std::optional<uint64_t>> before;
    for (int i = 0; i < c.size(); ++i) before.push_back(c.node(i)->service().TicksForTesting());
    clock.Advance(step);
    const auto give_up = Clock::now() + seconds(10);
    for (int i = 0; i < c.size(); ++i) {
      while (before[i] && Clock::now() < give_up) {
        const std::optional<uint64_t> now = c.node(i)->service().TicksForTesting();
        if (!now || *now > *before[i]) break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    SettleAfterStep(c, give_up);
  }
  return done();
}

// `duration` of protocol time passes, in steps (StepUntil) of `step`.
inline void StepFor(Nodes& c, ManualClock& clock, milliseconds duration,
                    milliseconds step = milliseconds(20)) {
  StepUntil(
      c, clock, [] { return false; }, duration - step, step);
}

// Nodes::Quiesce on `clock`: every node waits for quiescence on a thread of
// its own while this one moves the clock (StepUntil), up to `limit` of
// protocol time; a node not quiescent by then returns what its last wait
// said (kDeadlineExceeded, and why). Its waits are short on the steady
// clock (WaitQuiescent's deadline), and repeated until the stepping ends.
inline std::vector<absl::Status> QuiesceOn(Nodes& c, ManualClock& clock,
                                           milliseconds limit = seconds(20)) {
  std::vector<absl::Status> results(c.size());
  std::atomic<int> finished{0};
  std::atomic<bool> stepping_ended{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < c.size(); ++i) {
    threads.emplace_back([&, i] {
      c.node(i)->training().SetTrainingDone(0);
      absl::Status s;
      do {
        s = c.node(i)->training().WaitQuiescent(Clock::now() + milliseconds(50),
                                                [](Received&) { return absl::OkStatus(); });
      } while (s.code() == absl::StatusCode::kDeadlineExceeded && !stepping_ended.load());
      results[i] = s;
      ++finished;
    });
  }
  StepUntil(
      c, clock, [&] { return finished.load() == c.size(); }, limit);
  stepping_ended = true;
  for (auto& t : threads) t.join();
  return results;
}

inline bool Eventually(const std::function<bool()>& done,
                       milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return done();
}

}  // namespace reckon::server::testing

#endif  // RECKON_TESTS_INPROC_CLUSTER_H_
