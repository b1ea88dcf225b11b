// The gossip node, every message to every member exactly once: pushes, relays, the tree overlay,
// repairs, lanes: over in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

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
  const uint64_t repairs_before = c.node(0)->service().counters().repairs_sent();
  for (int k = 0; k < 50; ++k) {  // 200 messages, four a heartbeat interval
    c.Publish(0, 1 + 4 * k, 4);
    StepFor(c, clock, milliseconds(20));
  }
  EXPECT_LT(SeqOf(c.node(1)->service().Applied(), {"n0", 1000}), 200u)
      << "the last are 400 ms away";
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 200;
      },
      seconds(5)));
  StepFor(c, clock, seconds(1));  // many heartbeats more
  EXPECT_EQ(repairs_before, 0u);
  EXPECT_EQ(c.node(0)->service().counters().repairs_sent(), 0u);
  EXPECT_EQ(c.node(1)->service().counters().duplicates_dropped(), 0u);
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
  // n0 dials n2 (a seed) while n2 may dial n0, told of it by n1: all are
  // alive before the crossed streams are judged, and n0's first messages on
  // the stream that loses are served again on the one kept (repairs, and
  // right). On a loaded machine that judging came after the first messages
  // (2 repairs from n0; four copies at once on two cores each failed within
  // 1,000 runs): the streams settle first, and what n0 sends again is
  // counted from here.
  StepFor(c, clock, milliseconds(200));
  const uint64_t own_repairs_before = c.node(0)->service().counters().repairs_sent();
  const OriginKey n0{"n0", 1000};
  // 300 messages, two a heartbeat interval (3 s). The first second n2 hears
  // nothing of n0's updates (it hears its heartbeats: n1 relays nothing);
  // from 1.5 s on there are no relays either.
  uint64_t relays_before = 0;
  for (int k = 0; k < 150; ++k) {
    if (k == 40) {
      // 0.8 s in: n0's first update is still 1 s on its way to n2.
      EXPECT_EQ(SeqOf(c.node(2)->service().Applied(), n0), 0u);
    }
    if (k == 75) {
      // n0's stream reaches n2 (about 50 of its messages by now on the
      // nodes' clock; the frames due are delivered and applied in real
      // time, and a loaded machine had 16 there, once in 4,000 runs).
      ASSERT_GE(SeqOf(c.node(2)->service().Applied(), n0), 1u);
      relays_before = c.node(1)->service().counters().repairs_sent();
    }
    c.Publish(0, 1 + 2 * k, 2);
    StepFor(c, clock, milliseconds(20));
  }
  ASSERT_TRUE(StepUntil(
      c, clock, [&] { return SeqOf(c.node(2)->service().Applied(), n0) == 300; }, seconds(5)));
  StepFor(c, clock, milliseconds(300));  // heartbeats more
  EXPECT_EQ(c.node(1)->service().counters().repairs_sent(), relays_before);
  EXPECT_EQ(c.node(0)->service().counters().repairs_sent(), own_repairs_before);
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
      c, clock, [&] { return SeqOf(c.node(2)->service().Applied(), n0) == 20; }, seconds(10)))
      << VersionJson(c.node(2)->service().Applied());
  EXPECT_GE(c.node(1)->service().counters().repairs_sent(), 20u);
  EXPECT_EQ(c.node(1)->service().counters().repairs_resent(), 0u);
  EXPECT_EQ(c.node(2)->service().ReplicaHash(), c.node(0)->service().ReplicaHash());
}

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
        if (SeqOf(c.node(i)->service().Applied(), n0) != 50) return false;
      }
      return true;
    }));
    // What else sent update frames, should a count be off (once, under
    // ASan, n0 sent and the network carried 351 in the mesh, with no
    // duplicate dropped: a frame resent after its stream closed?).
    const auto others = [&] {
      std::string said;
      for (int i = 0; i < 8; ++i) {
        const v1::NodeCounters& k = c.node(i)->service().counters();
        absl::StrAppend(&said, " n", i, ": repairs ", k.repairs_sent(), " (", k.repairs_resent(),
                        " resent), queue drops ", k.queue_drops(), ", members failed ",
                        k.members_failed(), ";");
      }
      return said;
    };
    EXPECT_EQ(c.node(0)->service().counters().update_frames_sent(), tree ? 3u * 50 : 7u * 50)
        << others();
    EXPECT_EQ(c.net().counters().update_frames - frames_before, 7u * 50) << others();
    for (int i = 0; i < 8; ++i) {
      EXPECT_EQ(c.node(i)->service().counters().duplicates_dropped(), 0u) << i;
      EXPECT_EQ(c.node(i)->service().ReplicaHash(), c.node(0)->service().ReplicaHash()) << i;
    }
    if (tree) {
      // n3 is a leaf of n0's tree; n2 forwards to it, n4 to n5 and n6.
      EXPECT_EQ(c.node(3)->service().counters().update_frames_sent(), 0u);
      EXPECT_EQ(c.node(2)->service().counters().update_frames_sent(), 50u);
      EXPECT_EQ(c.node(4)->service().counters().update_frames_sent(), 2u * 50);
    }
    EXPECT_TRUE(AllAlive(c)) << "the fewer heartbeats to non-neighbours still keep all alive";
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
      c, clock, [&] { return SeqOf(c.node(4)->service().Applied(), n0) == 10; }, seconds(5)));
  c.node(4)->Stop(/*leave=*/false, milliseconds(0));
  for (int k = 0; k < 20; ++k) {  // 40 more, two a heartbeat interval
    c.Publish(0, 11 + 2 * k, 2);
    StepFor(c, clock, milliseconds(20));
  }
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        for (int i : {1, 2, 3, 5, 6, 7}) {
          if (SeqOf(c.node(i)->service().Applied(), n0) != 50) return false;
        }
        return true;
      },
      seconds(10)))
      << VersionJson(c.node(5)->service().Applied());
  for (int i : {1, 2, 3, 5, 6, 7}) {
    EXPECT_EQ(c.node(i)->service().ReplicaHash(), c.node(0)->service().ReplicaHash()) << i;
  }
  EXPECT_EQ(SeqOf(c.node(4)->service().Applied(), n0), 10u) << "it failed after the first ten";
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
  ASSERT_TRUE(
      step_until([&] { return SeqOf(c.node(1)->service().Applied(), n0) == 5; }, seconds(5)));
  step_until([] { return false; }, milliseconds(1500));  // past the retention (1 s here)
  v1::NodeStatus s;
  c.node(0)->service().FillStatus(&s, false);
  EXPECT_GE(s.log_messages(), 5u) << s.DebugString();
  c.net().Heal();
  ASSERT_TRUE(
      step_until([&] { return SeqOf(c.node(2)->service().Applied(), n0) == 5; }, seconds(10)))
      << VersionJson(c.node(2)->service().Applied());
  EXPECT_EQ(c.node(2)->service().counters().snapshots_loaded(), 0u);
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
    return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 100;
  })) << VersionJson(c.node(1)->service().Applied());
  EXPECT_GT(c.node(1)->service().counters().early_dropped(), 0u);  // there were losses...
  EXPECT_GT(c.node(0)->service().counters().repairs_sent(), 0u);   // ...and repairs
  const GossipNode::Counters n0 = c.node(0)->service().counters();
  EXPECT_GT(n0.repairs_resent(), 0u);
  EXPECT_LE(n0.repairs_sent() - n0.repairs_resent(), 100u) << n0.repairs_sent() << " repairs";
  EXPECT_EQ(c.node(1)->service().counters().updates_applied(), 100u);
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
      3, milliseconds(0),
      [&](int i, NodeOptions& o) { o.signatures = *MakeUpdateSignatures(tls[i]); }, {}, &clock);
  c.net().Partition({{c.node(0), c.node(1)}, {c.node(2)}});
  c.Start();
  c.Publish(0, 1, 10);
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 10;
      },
      seconds(5)));
  c.node(0)->Stop(/*leave=*/false, milliseconds(0));  // it dies before n2 ever met it
  c.net().Heal();
  ASSERT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(2)->service().Applied(), {"n0", 1000}) == 10;
      },
      seconds(10)))
      << VersionJson(c.node(2)->service().Applied());
  EXPECT_EQ(c.node(2)->service().counters().signature_errors(), 0u);
  EXPECT_EQ(c.node(1)->service().counters().signature_errors(), 0u);
  EXPECT_EQ(c.node(2)->service().ReplicaHash(), c.node(1)->service().ReplicaHash());
}

// Lanes (server/lanes.h) with the size floor at 0, so that the test's small
// Updates count as big: once the first goes to a member, three lanes open
// to it, and the Updates go round the stream and the lanes. Every message
// is applied once, in order per origin, and nothing is taken for lost:
// the loss evidence counts each link's frames. Seeds only to later nodes
// (SeedOnlyLaterNodes): with every node seeding every other, under load an
// Update sent on the stream a pair dropped (both had dialed) was lost and
// repaired, correctly, and counted. n2 may still dial n0 on hearing of it
// from n1 before n0's dial lands; by AllAlive those have settled in every
// run seen (4 x 100 beside a clang build, the short tests under four
// spinning loads).
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
    const GossipNode::Counters n = c.node(i)->service().counters();
    EXPECT_EQ(n.updates_applied(), 400u) << i;
    EXPECT_EQ(n.duplicates_dropped(), 0u) << i;
    EXPECT_EQ(n.repairs_sent(), 0u) << i;
    // Sent 2 x 200, round the stream and three lanes once these were up:
    // about three in four on lanes.
    EXPECT_GE(n.lane_update_frames_sent(), 250u) << i;
    EXPECT_LT(n.lane_update_frames_sent(), 400u) << i;
    EXPECT_EQ(c.node(i)->service().ReplicaHash(), c.node(0)->service().ReplicaHash()) << i;
    v1::NodeStatus s;
    c.node(i)->service().FillStatus(&s, false);
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
        c.node(0)->service().FillStatus(&s);
        return s.members_size() == 1 && s.members(0).state() == "alive";
      },
      milliseconds(2000)));
  c.Publish(0, 1, 50, milliseconds(2));
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 50;
  }));
  // Ten ticks (lanes are dialed at a tick) on the nodes' clock.
  StepUntil(
      c, clock, [] { return false; }, milliseconds(200), milliseconds(20));
  EXPECT_EQ(c.node(0)->service().counters().lane_update_frames_sent(), 0u);
  v1::NodeStatus s;
  c.node(1)->service().FillStatus(&s, false);
  ASSERT_EQ(s.members_size(), 1);
  EXPECT_EQ(s.members(0).lanes_in(), 0u);
}

}  // namespace
}  // namespace reckon::server
