// The gossip node, who is a member: handshakes, dials, names nobody heard, the fingerprint,
// addresses, the member cap, slow is not dead: over in-process links (tests/node/node_test_util.h).
#include <gtest/gtest.h>

#include "tests/node/node_test_util.h"

namespace reckon::server {
namespace {

using namespace ::reckon::server::testing;  // NOLINT: the fixture
using std::chrono::milliseconds;
using std::chrono::seconds;

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
  EXPECT_EQ(c.node(0)->service().counters().updates_applied(), 0u);
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
  EXPECT_EQ(c.node(0)->service().counters().updates_applied(), 0u);
  c.net().Heal();
  c.Publish(0, 1, 5);
  EXPECT_TRUE(StepUntil(
      c, clock,
      [&] {
        return SeqOf(c.node(1)->service().Applied(), {"n0", 1000}) == 5;
      },
      seconds(5), milliseconds(100)))
      << VersionJson(c.node(1)->service().Applied());
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
        c.node(1)->service().FillStatus(&s, false);
        return s.members_size() == 4;  // n0 and the ghosts (the liar left)
      },
      seconds(5)));
  c.Publish(0, 1, 5);
  c.Publish(1, 1, 5);
  for (const absl::Status& s : QuiesceOn(c, clock, seconds(5))) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.node(0)->service().ReplicaHash(), c.node(1)->service().ReplicaHash());
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
    node->service().FillStatus(&s, false);
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
  ASSERT_TRUE(Eventually([&] {
    return SeqOf(node->service().Applied(), OriginKey{"real", 3}) == 0 &&
           node->service().counters().members_refused() >= 13 && [&] {
             v1::NodeStatus s;
             node->service().FillStatus(&s, false);
             for (const auto& m : s.members())
               if (m.node_id() == "real") return m.state() == "alive";
             return false;
           }();
  }));
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
  EXPECT_EQ(node->training().TrainingMembers(), 1);
  ScriptedPeer a(node, "a", 7, "inproc:a");
  ScriptedPeer b(node, "b", 8, "inproc:b");
  ASSERT_TRUE(Eventually([&] { return node->training().TrainingMembers() == 3; }));
  v1::GossipFrame done;
  done.mutable_heartbeat()->set_training_done(true);
  a.Send(done);
  ASSERT_TRUE(Eventually([&] { return node->training().TrainingMembers() == 2; }));
  v1::GossipFrame leave;
  leave.mutable_leave()->set_reason("gone");
  b.Send(leave);
  ASSERT_TRUE(Eventually([&] { return node->training().TrainingMembers() == 1; }));
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
    node->service().FillStatus(&s, false);
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
    c.node(1)->service().FillStatus(&s);
    return s.members_size() == 1 && s.members(0).state() == "alive";
  }));
  // 150 messages at once: 1.5 s of work for n0, almost four failure timeouts.
  c.Publish(1, 1, 150);
  ASSERT_TRUE(Eventually(
      [&] {
        return SeqOf(c.node(0)->service().Applied(), {"n1", 1001}) == 150;
      },
      seconds(30)));
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(c.node(i)->service().counters().members_failed(), 0u) << "n" << i;
  for (const absl::Status& s : c.Quiesce()) EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(c.node(0)->service().ReplicaHash(), c.node(1)->service().ReplicaHash());
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
    for (int i = 0; i < 4; ++i) refused += c.node(i)->service().counters().members_refused();
    return refused > 0;
  }));
  for (int i = 0; i < 4; ++i) {
    v1::NodeStatus s;
    c.node(i)->service().FillStatus(&s);
    EXPECT_LE(s.members_size(), 2) << i;
    // A member past the cap is not a peer of another cluster.
    EXPECT_EQ(c.node(i)->service().counters().peers_refused(), 0u) << i;
  }
}

// A member reached at an address other than the one it advertises (a seed
// resolved to the member's IP while it announces its DNS name: every
// Compose cluster, every headless Service) used to be dialed there again
// every backoff, for ever: each dial refused by the member ("alive here on
// another stream"), logged on both ends and counted in its peers_refused,
// so the ReckonRefusals alert fired on every healthy cluster. The address
// is known to reach that member, by the handshake or by the member's
// refusal naming itself, and is not dialed while the member's stream is up.
TEST(GossipNode, AMemberReachedAtASecondAddressIsNotDialedThereWhileConnected) {
  for (const bool both_dial : {false, true}) {
    SCOPED_TRACE(both_dial ? "both dial: n0's dials refused" : "only n0 dials");
    ManualClock clock;
    Nodes c(2, milliseconds(0), [&](int i, NodeOptions& o) {
      o.clock = clock.Function();
      o.seeds.clear();
      if (i == 0) o.seeds.push_back("inproc:n1-by-ip");
      if (i == 1 && both_dial) o.seeds.push_back(Address(0));
    });
    // With both dialing, n1's stream comes first (the second address
    // answers nothing until then), as when n0's seed resolved late: n0's
    // dials there are all refused, but for a dial race.
    if (!both_dial) c.net().Listen("inproc:n1-by-ip", c.node(1));
    c.Start();
    ASSERT_TRUE(StepUntil(
        c, clock, [&] { return AllAliveNow(c); }, seconds(3)));
    if (both_dial) c.net().Listen("inproc:n1-by-ip", c.node(1));
    // Past the dial race's window (a failure timeout, 400 ms).
    StepFor(c, clock, seconds(1));
    auto refused = [&] {
      return c.node(1)->service().counters().peers_refused_for_now() +
             c.node(0)->service().counters().peers_refused_for_now();
    };
    const uint64_t before = refused();
    StepFor(c, clock, seconds(4));  // 20 of the longest backoff (200 ms)
    EXPECT_EQ(refused(), before) << "n0 dialed n1's second address again";
    EXPECT_TRUE(AllAliveNow(c));
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(c.node(i)->service().counters().peers_refused(), 0u)
          << i << ": a healthy cluster's refusals are all for now";
    }
  }
}

// A member that left is gone, that incarnation for good. Its Leave and a
// dial of its still in flight (a redial, or a stream to a second address
// of ours) travel on different connections: the Hello came after the
// Leave, was let in (a left member is not "alive here"), and the member was
// alive again until its process had gone, then dead: a worker stopped by
// SIGTERM showed as dead, not left, on one member of a Compose cluster.
// That incarnation's Hello is refused; a restart (a new incarnation) joins.
TEST(GossipNode, AHelloFromAnIncarnationThatLeftIsRefused) {
  ManualClock clock;
  Nodes c(
      1, milliseconds(0), [&](int, NodeOptions& o) { o.clock = clock.Function(); }, {}, &clock);
  c.Start();
  auto handled = [&] { StepFor(c, clock, milliseconds(40)); };
  ScriptedPeer b(c.node(0), "b", 5, "inproc:b");
  handled();
  ASSERT_TRUE(SeesAs(c, 0, "b", "alive"));
  v1::GossipFrame leave;
  leave.mutable_leave()->set_reason("shutting down");
  b.Send(leave);
  handled();
  ASSERT_TRUE(SeesAs(c, 0, "b", "left"));
  ScriptedPeer late_dial(c.node(0), "b", 5, "inproc:b");
  handled();
  EXPECT_TRUE(late_dial.link().closed()) << "the left incarnation's Hello refused";
  const v1::NodeCounters counters = c.node(0)->service().counters();
  EXPECT_EQ(counters.peers_refused_for_now(), 1u);
  EXPECT_EQ(counters.peers_refused(), 0u) << "a leaver's late dial is no misconfiguration";
  late_dial.Close();
  StepFor(c, clock, seconds(1));  // past the failure timeout (400 ms)
  EXPECT_TRUE(SeesAs(c, 0, "b", "left"));
  ScriptedPeer restarted(c.node(0), "b", 6, "inproc:b");
  handled();
  EXPECT_TRUE(SeesAs(c, 0, "b", "alive")) << "a new incarnation is let in";
  EXPECT_FALSE(restarted.link().closed());
}

}  // namespace
}  // namespace reckon::server
