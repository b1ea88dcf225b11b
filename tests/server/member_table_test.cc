// MemberTable: the gossip node's part, tested without sockets (server/member_table.h).
#include "server/member_table.h"

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
#include "server/membership.h"
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

// The member table owns the members and the streams waiting for their
// Hello: a Hello it admits ends the wait and adds the member once; a newer
// incarnation begins afresh (what the old one said is forgotten, its
// identity and address stay); a stream belongs to the member it was
// attached to; a member list teaches within the cap.
TEST(MemberTable, AdmitsOnceRestartsOnANewerIncarnationAndFindsMembersByStream) {
  MemberTable table({{"a", 9}, /*max_members=*/2, {/*cap=*/4, std::chrono::seconds(10)}});
  const Clock::time_point t0{};
  auto stream = std::make_shared<NowhereLink>();
  EXPECT_TRUE(table.AwaitHello(stream, t0).empty());
  EXPECT_TRUE(table.AwaitsHello(stream));
  const v1::Hello hello = HelloFrom("b", 5, "b:1");
  ASSERT_EQ(table.Judge(hello, {}).kind, HelloVerdict::kAdmit);
  MemberTable::Admitted b = table.Admit(stream, hello, t0 + milliseconds(1));
  ASSERT_NE(b.member, nullptr);
  EXPECT_FALSE(b.restarted) << "a first incarnation is no restart";
  EXPECT_FALSE(table.AwaitsHello(stream)) << "admitted: it waits no more";
  EXPECT_EQ(b.member->node_id, "b");
  EXPECT_EQ(b.member->incarnation, 5u);
  EXPECT_EQ(b.member->first_known, t0 + milliseconds(1));
  b.member->links.Attach(stream, 0, Clock::now());
  EXPECT_EQ(b.member->state(), MemberState::kConnecting);
  EXPECT_TRUE(table.MarkAlive(*b.member, t0 + milliseconds(2))) << "handshaken: newly alive";
  EXPECT_FALSE(table.MarkAlive(*b.member, t0 + milliseconds(3))) << "alive already";
  EXPECT_EQ(b.member->alive_since(), t0 + milliseconds(3));
  b.member->address = "b:1";
  b.member->applied = {{{"b", 5}, 3}};
  b.member->training_done = true;
  EXPECT_EQ(table.FindByStream(stream), b.member);
  EXPECT_EQ(table.FindByStream(std::make_shared<NowhereLink>()), nullptr);
  EXPECT_TRUE(table.IsCurrent({"b", 5}));
  EXPECT_TRUE(table.IsAlive({"b", 5}));
  EXPECT_FALSE(table.IsAlive({"b", 4}));
  EXPECT_EQ(table.AliveIds(), std::vector<std::string>{"b"});
  EXPECT_EQ(table.LiveAddresses("x:1"), std::vector<std::string>{"b:1"});
  EXPECT_TRUE(table.LiveAddresses("b:1").empty());
  EXPECT_TRUE(table.ConnectedOrLeftAt("b:1", ""));
  EXPECT_FALSE(table.ConnectedOrLeftAt("10.0.0.2:1", ""));
  EXPECT_TRUE(table.ConnectedOrLeftAt("10.0.0.2:1", "b")) << "an address a dial found b at";
  // The same incarnation again (a second stream) adds nothing.
  EXPECT_EQ(table.Admit(std::make_shared<NowhereLink>(), hello, t0 + milliseconds(2)).member,
            b.member);
  EXPECT_EQ(table.size(), 1u);
  // Restarted: a newer incarnation forgets what the old one said.
  MemberTable::Admitted again =
      table.Admit(std::make_shared<NowhereLink>(), HelloFrom("b", 6, "b:1"), t0 + seconds(1));
  EXPECT_EQ(again.member, b.member);
  EXPECT_TRUE(again.restarted);
  EXPECT_EQ(b.member->incarnation, 6u);
  EXPECT_TRUE(b.member->applied.empty());
  EXPECT_FALSE(b.member->training_done);
  EXPECT_EQ(b.member->first_known, t0 + milliseconds(1)) << "its identity and times stay";
  EXPECT_FALSE(table.IsCurrent({"b", 5}));
  // Its old incarnation may take the id back only while the new one is
  // away (Membership.HelloIsJudgedByTheProtocolsRulesInOrder).
  HelloContext later;
  later.now = t0 + seconds(10);
  EXPECT_EQ(table.Judge(HelloFrom("b", 5), later).kind, HelloVerdict::kAdmit);
  // A member list from b teaches c; d is past the cap of two, counted.
  google::protobuf::RepeatedPtrField<v1::Member> list;
  for (const char* id : {"c", "d"}) {
    v1::Member* entry = list.Add();
    entry->set_node_id(id);
    entry->set_address(absl::StrCat(id, ":1"));
    entry->set_heard(true);
  }
  const ListLearned learned = table.Learn(*b.member, list, t0 + seconds(2));
  EXPECT_EQ(learned.refused, 1u);
  ASSERT_EQ(learned.addresses.size(), 1u);
  EXPECT_EQ(learned.addresses[0].member, table.Find("c"));
  EXPECT_EQ(table.Find("c")->state(), MemberState::kConnecting);
  EXPECT_EQ(table.Find("d"), nullptr);
  EXPECT_EQ(table.Judge(HelloFrom("d", 1), {}).reason,
            "this cluster already has 2 members besides this node");
  EXPECT_EQ(table.Judge(HelloFrom("a", 9), {}).kind, HelloVerdict::kSelfDial)
      << "self from options";
  // A silent accepted stream is closed after the hello timeout.
  auto silent = std::make_shared<NowhereLink>();
  EXPECT_TRUE(table.AwaitHello(silent, t0 + seconds(3)).empty());
  EXPECT_TRUE(table.TakeSilent(t0 + seconds(13)).empty());
  EXPECT_EQ(table.TakeSilent(t0 + seconds(14)), std::vector<std::shared_ptr<Link>>{silent});
  EXPECT_TRUE(table.AwaitingHello().empty());
}

}  // namespace
}  // namespace reckon::server
