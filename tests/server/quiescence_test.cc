// Quiescence: the gossip node's part, tested without sockets (server/quiescence.h).
#include "server/quiescence.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/anti_entropy.h"
#include "server/applied_state.h"
#include "server/checksum_ledger.h"
#include "server/dial_schedule.h"
#include "server/early_arrivals.h"
#include "server/held_bytes.h"
#include "server/inbox.h"
#include "server/joiners.h"
#include "server/lanes.h"
#include "server/member_table.h"
#include "server/membership.h"
#include "server/message_log.h"
#include "server/overlay.h"
#include "server/pending_handshakes.h"
#include "server/snapshot_cuts.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// --- quiescence -----------------------------------------------------------

LocalQuiescence Done(const VersionMap& applied, const std::string& hash) {
  LocalQuiescence q;
  q.node_id = "me";
  q.training_done = true;
  q.applied = applied;
  q.settled = true;
  q.settled_at = applied;
  q.settled_hash = hash;
  return q;
}

Member Peer(const std::string& id, const VersionMap& applied, bool settled, const std::string& hash,
            MemberState state = MemberState::kAlive) {
  Member m;
  m.node_id = id;
  MemberTestAccess::SetState(m, state);
  m.training_done = true;
  m.applied = applied;
  m.settled = settled;
  m.weight_hash = hash;
  m.vouched = true;
  return m;
}

TEST(Quiescence, NeedsEveryLiveMemberSettledAtOurVectorAndHash) {
  const VersionMap v = {{kA, 5}, {kB, 7}};
  MemberMap members = {{"b", Peer("b", v, true, "h")}, {"c", Peer("c", v, true, "h")}};
  std::string why;
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;

  // Phase one alone is not enough: c finished at our vector but has not
  // said it settled (it may still wait on a member only it knows).
  members["c"].settled = false;
  EXPECT_TRUE(Settled(Done(v, "h"), members, &why)) << why;
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  EXPECT_EQ(why, "c has not settled at our version vector");

  // A dead or departed member is not waited for.
  MemberTestAccess::SetState(members["c"], MemberState::kDead);
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
  MemberTestAccess::SetState(members["c"], MemberState::kLeft);
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;

  // Settled at another vector: not yet.
  members["b"].applied = {{kA, 5}, {kB, 6}};
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  EXPECT_NE(why.find("b has another version vector"), std::string::npos) << why;
}

TEST(Quiescence, PhaseOneWaitsForTrainingApplyingReachingAndConnecting) {
  const VersionMap v = {{kA, 5}};
  MemberMap members = {{"b", Peer("b", v, true, "h")}};
  std::string why;
  LocalQuiescence q = Done(v, "h");
  q.training_done = false;
  EXPECT_FALSE(Settled(q, members, &why));
  EXPECT_EQ(why, "training");
  q = Done(v, "h");
  q.applying = true;
  EXPECT_FALSE(Settled(q, members, &why));
  EXPECT_EQ(why, "applying");
  q = Done(v, "h");
  q.unreached = true;
  EXPECT_FALSE(Settled(q, {}, &why));
  EXPECT_EQ(why, "never reached any member of the cluster");
  members["c"] = Peer("c", v, true, "h", MemberState::kConnecting);
  EXPECT_FALSE(Settled(Done(v, "h"), members, &why));
  EXPECT_EQ(why, "waiting to reach c");
  // A worker that asked us for a snapshot and has not connected yet is a
  // member on its way in: ending without it would drop its shard.
  LocalQuiescence awaiting = Done(v, "h");
  awaiting.joining = {"d"};
  EXPECT_FALSE(Settled(awaiting, {}, &why));
  EXPECT_EQ(why, "d is joining (it asked for a snapshot and has not connected yet)");
  MemberTestAccess::SetState(members["c"], MemberState::kAlive);
  members["c"].training_done = false;
  EXPECT_FALSE(Settled(Done(v, "h"), members, &why));
  EXPECT_EQ(why, "c is still training");
  // Our hash taken at an older vector: not quiescent until retaken.
  members.erase("c");
  LocalQuiescence stale = Done(v, "h");
  stale.settled_at = {{kA, 4}};
  EXPECT_FALSE(Quiescent(stale, members, &why));
}

TEST(Quiescence, SameVectorOtherHashIsADivergence) {
  const VersionMap v = {{kA, 5}};
  const Member bad = Peer("b", v, true, "other");
  EXPECT_EQ(Divergence(Done(v, "mine"), bad).value_or(""),
            "replicas diverged: b has weights other but me has mine after applying the same "
            "messages {\"a#1\":5}");
  std::string why;
  EXPECT_FALSE(Quiescent(Done(v, "mine"), {{"b", bad}}, &why));
  // Not a divergence: another vector, not settled, same hash, or dead.
  EXPECT_FALSE(Divergence(Done(v, "mine"), Peer("b", {{kA, 4}}, true, "other")));
  EXPECT_FALSE(Divergence(Done(v, "mine"), Peer("b", v, false, "other")));
  EXPECT_FALSE(Divergence(Done(v, "mine"), Peer("b", v, true, "mine")));
  EXPECT_FALSE(Divergence(Done(v, "mine"), Peer("b", v, true, "other", MemberState::kDead)));
}

// A majority of the members that have not left must agree, this node
// included: a member that looks dead may be cut off and training on, and two
// sides of a partition must never both end (the 2 | 2 fork of
// gossip_netns_test). Members that left (they agreed before leaving) do not
// count; a cluster of one is fine.
TEST(Quiescence, NeedsAMajorityOfTheMembersThatHaveNotLeft) {
  const VersionMap v = {{kA, 5}};
  std::string why;
  // b and c were cut off while still training (not settled).
  MemberMap members = {{"b", Peer("b", {{kA, 3}}, false, "", MemberState::kDead)},
                       {"c", Peer("c", {{kA, 3}}, false, "", MemberState::kDead)},
                       {"d", Peer("d", v, true, "h", MemberState::kAlive)}};
  EXPECT_TRUE(Settled(Done(v, "h"), members, &why)) << why;
  // One side of a 2 | 2 partition: two of four.
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  EXPECT_EQ(why,
            "only 2 of 4 members agree, not a majority (unreachable: b, c): a partition "
            "may be training on");
  members["c"] = Peer("c", v, true, "h");  // three of four: b may have crashed
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
  members.erase("d");
  members["c"] = Peer("c", {{kA, 3}}, false, "", MemberState::kDead);  // alone among the dead
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  MemberTestAccess::SetState(members["b"], MemberState::kLeft);
  MemberTestAccess::SetState(members["c"], MemberState::kLeft);
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
  EXPECT_TRUE(Quiescent(Done(v, "h"), {}, &why)) << why;  // alone by design
  // Dead and never heard by anybody (only named in a member list): not a
  // member that could be training on; it counts for nothing.
  members["e"] = Peer("e", {}, false, "", MemberState::kDead);
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  EXPECT_EQ(why,
            "only 1 of 2 members agree, not a majority (unreachable: e): a partition may be "
            "training on");
  members["e"].vouched = false;
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
}

// The hash of the whole replica is taken only when the node settles at a
// vector it was not settled at, never on the ticks in between.
TEST(Quiescence, TheSettlementHashesOnlyAtANewVector) {
  Settlement s;
  int hashed = 0;
  auto hash = [&] { return absl::StrCat("h", ++hashed); };
  const VersionMap v1 = {{kA, 5}}, v2 = {{kA, 6}};
  EXPECT_FALSE(s.Record(false, v1, hash));
  EXPECT_EQ(hashed, 0);
  EXPECT_FALSE(s.SettledAt(v1));
  EXPECT_TRUE(s.Record(true, v1, hash));
  EXPECT_TRUE(s.SettledAt(v1));
  EXPECT_EQ(s.hash(), "h1");
  EXPECT_FALSE(s.Record(true, v1, hash));  // the next tick: no new hash
  EXPECT_EQ(hashed, 1);
  EXPECT_TRUE(s.Record(true, v2, hash));  // a message more
  EXPECT_EQ(s.hash(), "h2");
  EXPECT_FALSE(s.SettledAt(v1));
  EXPECT_FALSE(s.Record(false, v2, hash));  // unsettled: kept, not announced
  EXPECT_FALSE(s.SettledAt(v2));
  EXPECT_TRUE(s.Record(true, v2, hash));  // settled again: taken again
  EXPECT_EQ(hashed, 3);
  // A hash not there yet (the training replica's, hashed on its own
  // thread): not settled, and asked again at the next tick.
  const VersionMap v3 = {{kA, 7}};
  auto not_yet = [] { return std::optional<std::string>(); };
  EXPECT_FALSE(s.Record(true, v3, not_yet));
  EXPECT_FALSE(s.settled());
  EXPECT_FALSE(s.SettledAt(v3));
  EXPECT_TRUE(s.Record(true, v3, hash));
  EXPECT_TRUE(s.SettledAt(v3));
  EXPECT_EQ(s.hash(), "h4");
}

// A member that said "settled at your vector with your hash" and then went
// silent agreed: its Leave was lost (seen on lossy links in
// gossip_netns_test). One that had not settled, or at another vector or
// hash, still counts against the majority.
TEST(Quiescence, ADeadMemberThatSettledWithUsAgreed) {
  const VersionMap v = {{kA, 5}};
  std::string why;
  // c left without agreeing (elsewhere): it counts for nothing, b decides.
  MemberMap members = {{"b", Peer("b", v, true, "h", MemberState::kDead)},
                       {"c", Peer("c", {{kA, 4}}, true, "h", MemberState::kLeft)}};
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
  members["b"] = Peer("b", v, false, "", MemberState::kDead);  // never settled
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  members["b"] = Peer("b", {{kA, 4}}, true, "h", MemberState::kDead);  // elsewhere
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  members["b"] = Peer("b", v, true, "other", MemberState::kDead);  // another hash
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
}

// A member that settled with us and then left (it ended here and said
// goodbye) agreed: with one dead member that never settled, it and we are
// two of three, a majority. Skipping it left us one of two and waiting for
// the quiesce timeout (GossipCluster.UpdateOfDeadOriginReachesEveryone, now
// and then in CI: w2 ended and left before w1 saw its last heartbeat).
TEST(Quiescence, AMemberThatSettledWithUsAndLeftAgreed) {
  const VersionMap v = {{kA, 5}};
  std::string why;
  MemberMap members = {{"w0", Peer("w0", {{kA, 4}}, false, "", MemberState::kDead)},
                       {"w2", Peer("w2", v, true, "h", MemberState::kLeft)}};
  EXPECT_TRUE(Quiescent(Done(v, "h"), members, &why)) << why;
  // One that left elsewhere or with other weights did not agree: it is gone
  // and counts for nothing, so we are one of two with the dead one.
  members["w2"] = Peer("w2", {{kA, 4}}, true, "h", MemberState::kLeft);
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
  members["w2"] = Peer("w2", v, true, "other", MemberState::kLeft);
  EXPECT_FALSE(Quiescent(Done(v, "h"), members, &why));
}

}  // namespace
}  // namespace reckon::server
