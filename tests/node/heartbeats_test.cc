// The gossip node, heartbeats, timeouts, the metrics of what is sent, and backpressure: over
// in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

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
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(c.node(3)->service().Applied(), {"n0", 1000}) == 20;
  }));
  std::map<std::string, double> values;
  for (const prometheus::MetricFamily& family : NodeMetrics(c.node(0)).Collect()) {
    if (family.metric.size() == 1) values[family.name] = family.metric[0].counter.value;
  }
  EXPECT_EQ(values["reckon_update_frames_sent_total"], 2 * 20);
  const GossipNode::Counters counters = c.node(0)->service().counters();
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
  node->service().OnLinkUp(silent);
  ScriptedPeer member(node, "w1", 7, "inproc:w1");
  auto member_alive = [&] {
    v1::NodeStatus s;
    node->service().FillStatus(&s, false);
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
    const uint64_t before = node->service().counters().bytes_received();
    v1::GossipFrame heartbeat;
    heartbeat.mutable_heartbeat()->set_local_steps(1);
    member.Send(std::move(heartbeat));
    // Handled before the clock moves on.
    ASSERT_TRUE(HandledBytes(node, before + 1));
  };
  for (int i = 0; i < 3; ++i) {
    member_speaks();
    ASSERT_TRUE(step(milliseconds(2500)));
  }
  member_speaks();                        // at 7.5 s, its last word
  ASSERT_TRUE(step(milliseconds(2480)));  // 9.98 s
  EXPECT_FALSE(silent->closed());
  EXPECT_EQ(node->service().counters().hello_timeouts(), 0u);
  ASSERT_TRUE(step(milliseconds(40)));  // 10.02 s
  ASSERT_TRUE(Eventually([&] { return silent->closed(); }));
  EXPECT_EQ(node->service().counters().hello_timeouts(), 1u);
  ASSERT_TRUE(step(milliseconds(460)));  // 10.48 s: 2.98 s since the member spoke
  EXPECT_TRUE(member_alive());
  EXPECT_EQ(node->service().counters().members_failed(), 0u);
  clock.Advance(milliseconds(40));  // 3.02 s
  ASSERT_TRUE(Eventually([&] { return node->service().counters().members_failed() == 1; }));
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
    node->service().FillStatus(&s, false);
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
    node->service().FillStatus(&s, false);
    return s.members(0).lag();
  };
  auto member_says = [&](bool changes_only, std::vector<std::pair<std::string, uint64_t>> entries) {
    const uint64_t before = node->service().counters().bytes_received();
    v1::GossipFrame f;
    f.mutable_heartbeat()->set_applied_changes_only(changes_only);
    for (const auto& [id, seq] : entries) {
      v1::VersionEntry* e = f.mutable_heartbeat()->mutable_applied()->add_entries();
      e->mutable_origin()->set_node_id(id);
      e->mutable_origin()->set_incarnation(id == "n0" ? 1000 : 1);
      e->set_seq(seq);
    }
    member.Send(std::move(f));
    ASSERT_TRUE(HandledBytes(node, before + 1));
  };
  member_says(false, {{"n0", 1}});
  EXPECT_EQ(lag(), 1);
  member_says(true, {{"x", 4}});  // another origin changed; n0 stays at 1
  EXPECT_EQ(lag(), 1);
  member_says(true, {{"n0", 2}});
  EXPECT_EQ(lag(), 0);
  member_says(false, {{"x", 4}});  // whole: n0 absent is 0
  EXPECT_EQ(lag(), 2);
  EXPECT_EQ(node->service().counters().frames_refused(), 0u);
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
  ASSERT_TRUE(Eventually([&] { return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 5; }));
  c.StopAll();  // nothing counts between the scrape and the reads below
  std::map<std::string, const prometheus::MetricFamily*> families;
  const std::vector<prometheus::MetricFamily> collected = NodeMetrics(c.node(1)).Collect();
  for (const prometheus::MetricFamily& f : collected) families[f.name] = &f;
  const GossipNode::Counters counters = c.node(1)->service().counters();
  v1::NodeStatus status;
  c.node(1)->service().FillStatus(&status, false);
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

// Backpressure: while our own messages not yet applied by a live peer are
// over the cap, the training thread waits; it goes on once the peer's
// heartbeat shows them applied (a round trip at least), and the wait is
// counted. Alone, or under the cap, it never waits.
TEST(GossipNode, TrainingWaitsWhileItsBacklogIsOverTheCap) {
  Nodes c(2, milliseconds(300), [](int, NodeOptions& o) {
    o.failure_timeout = seconds(3);
    o.max_backlog_bytes = 1;
  });
  EXPECT_TRUE(
      c.node(0)->training().WaitWhileBacklogged(Clock::now()));  // no peer yet: nothing owed
  c.Start();
  ASSERT_TRUE(PeerAlive(c));
  c.Publish(0, 1, 3);
  EXPECT_GT(c.node(0)->training().OwnBacklogBytes(), 0u);
  const auto start = Clock::now();
  ASSERT_TRUE(c.node(0)->training().WaitWhileBacklogged(start + seconds(20)));
  const auto waited = Clock::now() - start;
  EXPECT_EQ(SeqOf(c.node(1)->service().Applied(), {"n0", 1000}), 3u);
  EXPECT_EQ(c.node(0)->training().OwnBacklogBytes(), 0u);
  EXPECT_GE(waited, milliseconds(600));  // out and back over a 300 ms link
  EXPECT_GE(c.node(0)->service().counters().backpressure_ms(), 600u);
}

// --max-lag: while a live peer has not applied our last N messages (its
// heartbeats say what it applied), the training thread waits, and the wait
// is counted; a bound the peer is within never waits.
TEST(GossipNode, TrainingWaitsWhileAPeerLagsAndCountsTheWait) {
  Nodes c(2, milliseconds(300), [](int, NodeOptions& o) { o.failure_timeout = seconds(3); });
  c.Start();
  ASSERT_TRUE(PeerAlive(c));
  c.Publish(0, 1, 3);
  EXPECT_TRUE(c.node(0)->training().WaitWhileLagging(3, Clock::now()));  // 3 behind at most
  EXPECT_EQ(c.node(0)->service().counters().lag_wait_ms(), 0u);
  const auto start = Clock::now();
  ASSERT_TRUE(c.node(0)->training().WaitWhileLagging(0, start + seconds(20)));
  const auto waited = Clock::now() - start;
  EXPECT_EQ(SeqOf(c.node(1)->service().Applied(), {"n0", 1000}), 3u);
  EXPECT_GE(waited, milliseconds(600));  // out and back over a 300 ms link
  EXPECT_GE(c.node(0)->service().counters().lag_wait_ms(), 600u);
  // A deadline before the peer catches up: false, and that wait counted too.
  c.Publish(0, 4, 1);
  const uint64_t before = c.node(0)->service().counters().lag_wait_ms();
  EXPECT_FALSE(c.node(0)->training().WaitWhileLagging(0, Clock::now() + milliseconds(100)));
  EXPECT_GE(c.node(0)->service().counters().lag_wait_ms(), before + 100);
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
  EXPECT_GT(c.node(0)->training().OwnBacklogBytes(), 0u);
  EXPECT_LT(c.node(0)->training().OwnBacklogBytes(), size_t{1 << 20} / 4);
  EXPECT_TRUE(c.node(0)->training().WaitWhileBacklogged(Clock::now()));
  EXPECT_EQ(c.node(0)->service().counters().backpressure_ms(), 0u);
}

// The round trip the momentum rule takes (TrainingPort::PeerRoundTripSteps):
// read as each heartbeat lands, so it is the round trip in our own steps
// whatever the heartbeat interval, and about nothing on a link with no
// latency; unmeasured (negative) until the peer applied one of ours.
TEST(GossipNode, PeerRoundTripIsReadInOwnStepsAsHeartbeatsLand) {
  for (const int latency_ms : {100, 0}) {
    SCOPED_TRACE(::testing::Message() << latency_ms << " ms each way");
    ManualClock clock;
    Nodes c(2, milliseconds(latency_ms), nullptr, {}, &clock);
    c.Start();
    ASSERT_TRUE(StepUntil(
        c, clock, [&] { return AllAliveNow(c); }, seconds(5)));
    EXPECT_LT(c.node(0)->training().PeerRoundTripSteps(), 0.0);  // nothing published yet
    // A step of n0 every 20 ms of protocol time, for 2 s. A heartbeat of n1
    // lands 100 ms after it left, saying what had reached it by then, sent
    // 100 ms before that: n0 is 10 steps further, a round trip of 10 - 1 = 9
    // steps (up to 2 more: the harness delivers and applies on the clock's
    // 20 ms ticks).
    for (uint64_t seq = 1; seq <= 100; ++seq) {
      c.Publish(0, seq, 1);
      StepFor(c, clock, milliseconds(20));
    }
    const double round_trip = c.node(0)->training().PeerRoundTripSteps();
    if (latency_ms == 100) {
      EXPECT_GT(round_trip, 8.5);
      EXPECT_LT(round_trip, 11.5);
    } else {
      EXPECT_GE(round_trip, 0.0);
      EXPECT_LT(round_trip, 1.5);
    }
    EXPECT_LT(c.node(1)->training().PeerRoundTripSteps(), 0.0);  // n1 published nothing
  }
}

}  // namespace
}  // namespace reckon::server
