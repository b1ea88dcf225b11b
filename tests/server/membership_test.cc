// Membership: the gossip node's part, tested without sockets (server/membership.h).
#include "server/membership.h"

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
#include "server/message_log.h"
#include "server/overlay.h"
#include "server/pending_handshakes.h"
#include "server/quiescence.h"
#include "server/snapshot_cuts.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// docs/protocol.md section 3, rule by rule, in its order.
TEST(Membership, HelloIsJudgedByTheProtocolsRulesInOrder) {
  MemberMap members;
  members["b"].node_id = "b";
  members["b"].incarnation = 5;
  HelloContext c;
  c.self = {"a", 9};
  c.members = &members;
  c.max_members = 2;
  auto judge = [&](const v1::Hello& h) { return JudgeHello(h, c); };
  EXPECT_EQ(judge(HelloFrom("b", 5)).kind, HelloVerdict::kAdmit);
  EXPECT_EQ(judge(HelloFrom("b", 6)).kind, HelloVerdict::kAdmit);  // a restart
  // What no member of this cluster is sent counts in peers_refused (the
  // ReckonRefusals alert's); what a healthy cluster meets, in
  // peers_refused_for_now.
  constexpr int kRefused = v1::NodeCounters::kPeersRefusedFieldNumber;
  constexpr int kForNow = v1::NodeCounters::kPeersRefusedForNowFieldNumber;
  HelloVerdict v = judge(HelloFrom("b c", 1));
  EXPECT_EQ(v.reason, "node id 'b c' is not valid");
  EXPECT_TRUE(v.permanent);
  EXPECT_EQ(v.counter, kRefused);
  c.fingerprint_and_token = absl::FailedPreconditionError("cluster token does not match");
  EXPECT_EQ(judge(HelloFrom("b", 5)).reason, "cluster token does not match");
  EXPECT_EQ(judge(HelloFrom("b", 5)).counter, kRefused);
  c.fingerprint_and_token = absl::OkStatus();
  c.require_identity = true;
  c.peer_identity = "c";
  v = judge(HelloFrom("b", 5));
  EXPECT_EQ(v.reason, "node id 'b' is not the identity of its certificate ('c')");
  EXPECT_TRUE(v.permanent);
  EXPECT_EQ(v.counter, kRefused);
  c.require_identity = false;
  v = judge(HelloFrom("b", 5, ""));
  EXPECT_EQ(v.reason,
            "node 'b' sent no listen_address: every member must be reachable by every other");
  EXPECT_EQ(judge(HelloFrom("b", 5, std::string(256, 'x'))).reason,
            "listen_address is longer than 255 bytes");
  EXPECT_EQ(judge(HelloFrom("a", 9)).kind, HelloVerdict::kSelfDial);
  v = judge(HelloFrom("a", 8));
  EXPECT_EQ(v.reason,
            "node id 'a' is this node's (incarnation 9); every worker needs its own "
            "--node-id");
  members["c"].node_id = "c";
  v = judge(HelloFrom("d", 1));
  EXPECT_EQ(v.reason, "this cluster already has 2 members besides this node");
  EXPECT_FALSE(v.permanent);
  EXPECT_EQ(v.counter, v1::NodeCounters::kMembersRefusedFieldNumber);
  EXPECT_EQ(judge(HelloFrom("c", 1)).kind, HelloVerdict::kAdmit) << "known members still come in";
  // Another incarnation of b, older or newer: it takes the id while b is
  // away; while b is alive on its stream, heard within the failure
  // timeout, it waits (without TLS anyone with the token can claim one).
  EXPECT_EQ(judge(HelloFrom("b", 4)).kind, HelloVerdict::kAdmit);
  const Clock::time_point t0 = Clock::now();
  MemberTestAccess::SetState(members["b"], MemberState::kAlive);
  members["b"].last_heard = t0;
  members["b"].links.Attach(std::make_shared<NowhereLink>(), 0, t0);
  c.now = t0 + std::chrono::milliseconds(1500);
  c.failure_timeout = std::chrono::seconds(3);
  for (uint64_t incarnation : {4, 6}) {
    v = judge(HelloFrom("b", incarnation));
    EXPECT_EQ(v.reason, absl::StrCat("node 'b' incarnation 5 is alive here (heard 1500 ms ago): "
                                     "incarnation ",
                                     incarnation, " is let in once it is gone"));
    EXPECT_FALSE(v.permanent);
    EXPECT_EQ(v.counter, kForNow) << "a restart racing its old incarnation";
  }
  // Another stream of b's own incarnation: a dial race (opposite ways, b's
  // stream new, KeepsStream picks), else an impostor or a reconnection b's
  // stream has not seen end yet.
  c.link_dialed = true;  // b's stream was accepted, this one we dialed
  EXPECT_EQ(judge(HelloFrom("b", 5)).kind, HelloVerdict::kAdmit);
  c.link_dialed = false;
  v = judge(HelloFrom("b", 5));
  EXPECT_EQ(v.reason,
            "node 'b' incarnation 5 is alive here on another stream (heard 1500 ms ago): a "
            "second stream is let in once that one is gone");
  EXPECT_FALSE(v.permanent);
  EXPECT_EQ(v.counter, kForNow);
  members["b"].last_heard = t0 + std::chrono::seconds(3);
  c.now = t0 + std::chrono::milliseconds(3500);  // b heard; its stream 3.5 s old
  c.link_dialed = true;
  EXPECT_EQ(judge(HelloFrom("b", 5)).kind, HelloVerdict::kRefuse) << "no race: b's stream is old";
  members["b"].last_heard = t0;
  c.now = t0 + std::chrono::seconds(4);  // silent past the failure timeout
  EXPECT_EQ(judge(HelloFrom("b", 4)).kind, HelloVerdict::kAdmit);
  EXPECT_EQ(judge(HelloFrom("b", 5)).kind, HelloVerdict::kAdmit);
}

TEST(Membership, BothEndsKeepTheStreamDialedByTheSmallerId) {
  // "a" < "b": a keeps what it dialed, b keeps what it accepted: the same stream.
  EXPECT_TRUE(KeepsStream("a", "b", /*dialed=*/true));
  EXPECT_FALSE(KeepsStream("a", "b", /*dialed=*/false));
  EXPECT_TRUE(KeepsStream("b", "a", /*dialed=*/false));
  EXPECT_FALSE(KeepsStream("b", "a", /*dialed=*/true));
}

TEST(Membership, SilenceFromAliveOrUnreachedMembersMakesThemDead) {
  const Clock::time_point t0{};
  const Clock::duration timeout = std::chrono::seconds(3);
  Member m;
  m.node_id = "b";
  MemberTestAccess::SetState(m, MemberState::kAlive);
  m.last_heard = t0;
  EXPECT_FALSE(SilentTooLong(m, t0 + std::chrono::seconds(3), timeout));
  EXPECT_EQ(SilentTooLong(m, t0 + milliseconds(3500), timeout),
            std::optional<std::string>("peer b missed heartbeats for 3.5 s: marked dead"));
  MemberTestAccess::SetState(m, MemberState::kConnecting);
  m.first_known = t0 + std::chrono::seconds(1);
  EXPECT_FALSE(SilentTooLong(m, t0 + milliseconds(3500), timeout));
  EXPECT_EQ(SilentTooLong(m, t0 + std::chrono::seconds(5), timeout),
            std::optional<std::string>("peer b not reached in 4.0 s: marked dead"));
  MemberTestAccess::SetState(m, MemberState::kDead);
  EXPECT_FALSE(SilentTooLong(m, t0 + std::chrono::seconds(60), timeout));
  MemberTestAccess::SetState(m, MemberState::kLeft);
  EXPECT_FALSE(SilentTooLong(m, t0 + std::chrono::seconds(60), timeout));
}

// A heartbeat's member list: new ids become members (up to the cap, the
// rest counted), a never-reached member moves only where a member that
// hears it says, a reached one never; whoever the sender hears is vouched
// and in its `hears`; our own id and bad entries teach nothing.
TEST(Membership, AMemberListTeachesIdsAddressesAndWhoIsHeard) {
  const Clock::time_point now = Clock::now();
  MemberMap members;
  Member& from = members["f"];
  from.node_id = "f";
  from.incarnation = 3;
  MemberTestAccess::SetState(from, MemberState::kAlive);
  Member& reached = members["r"];
  reached.node_id = "r";
  reached.incarnation = 2;
  reached.address = "r:1";
  reached.vouched = true;
  google::protobuf::RepeatedPtrField<v1::Member> list;
  auto add = [&](const std::string& id, uint64_t incarnation, const std::string& address,
                 bool heard) {
    v1::Member* m = list.Add();
    m->set_node_id(id);
    m->set_incarnation(incarnation);
    m->set_address(address);
    m->set_heard(heard);
  };
  add("me", 1, "me:1", true);         // our own entry
  add("bad id!", 1, "x:1", true);     // not an id a Hello could carry
  add("noaddr", 1, "", true);         // no address
  add("r", 2, "elsewhere:1", true);   // reached: its own Hello said where
  add("ghost", 1, "ghost:1", false);  // named, heard by nobody
  add("heard", 5, "heard:1", true);   // new, and the sender hears it
  add("over", 1, "over:1", true);     // past the cap of 4
  ListLearned learned = LearnMemberList(from, list, "me", 4, now, &members);
  ASSERT_EQ(learned.addresses.size(), 2u);
  EXPECT_EQ(learned.addresses[0].member, &members.at("ghost"));
  EXPECT_EQ(learned.addresses[0].address, "ghost:1");
  EXPECT_TRUE(learned.addresses[0].new_member);
  EXPECT_EQ(learned.addresses[1].member, &members.at("heard"));
  EXPECT_EQ(learned.refused, 1u);
  EXPECT_EQ(members.size(), 4u);  // f, r, ghost, heard
  EXPECT_EQ(members.at("ghost").first_known, now);
  EXPECT_EQ(members.at("ghost").state(), MemberState::kConnecting);
  EXPECT_FALSE(members.at("ghost").vouched);
  EXPECT_TRUE(members.at("heard").vouched);
  EXPECT_EQ(from.hears, (std::set<OriginKey>{{"r", 2}, {"heard", 5}, {"over", 1}}));
  // The ghost, never reached, moves only where a member that hears it says.
  list.Clear();
  add("ghost", 1, "old-ip:1", false);
  EXPECT_TRUE(LearnMemberList(from, list, "me", 4, now, &members).addresses.empty());
  list.Clear();
  add("ghost", 0, "new-ip:1", true);
  learned = LearnMemberList(from, list, "me", 4, now, &members);
  ASSERT_EQ(learned.addresses.size(), 1u);
  EXPECT_EQ(learned.addresses[0].address, "new-ip:1");
  EXPECT_FALSE(learned.addresses[0].new_member);
  EXPECT_TRUE(members.at("ghost").vouched);
  // An empty list (a heartbeat between two that carry one) changes nothing.
  list.Clear();
  EXPECT_TRUE(LearnMemberList(from, list, "me", 4, now, &members).addresses.empty());
  EXPECT_EQ(from.hears, (std::set<OriginKey>{{"ghost", 0}}));
}

// A framework's layouts that differ are said by the first tensor that
// differs; reckon-worker's model strings are left whole (nullopt).
TEST(Membership, AModelDifferenceNamesTheFirstTensorThatDiffers) {
  EXPECT_EQ(DescribeModelDifference("0.weight:64x784;0.bias:64;2.weight:10x64",
                                    "0.weight:64x784;0.bias:32;2.weight:10x32"),
            "tensor 1 is '0.bias:64' there but '0.bias:32' here");
  EXPECT_EQ(DescribeModelDifference("a:3;b:4", "a:3;b:4;c:5"), "tensor 2 'c:5' only here");
  EXPECT_EQ(DescribeModelDifference("a:3;b:4;c:5", "a:3;b:4"), "tensor 2 'c:5' only there");
  EXPECT_EQ(DescribeModelDifference("784,64,10/relu", "784,128,10/relu"), std::nullopt);
  // What a peer sends is quoted at most 64 characters a part.
  const std::string long_name(1000, 'x');
  const std::optional<std::string> said =
      DescribeModelDifference(absl::StrCat(long_name, ":1"), "y:1");
  ASSERT_TRUE(said.has_value());
  EXPECT_LT(said->size(), 200u);
}

}  // namespace
}  // namespace reckon::server
