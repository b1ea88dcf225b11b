// HeartbeatWriter: what the node's heartbeats say and to whom a tick's go,
// tested without sockets or a node (server/heartbeat_writer.h).
#include "server/heartbeat_writer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/server/parts_test_util.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

class HeartbeatWriterTest : public ::testing::Test {
 protected:
  HeartbeatWriterTest() : table_({{"me", 7}, /*max_members=*/8, {/*cap=*/4, seconds(10)}}) {}
  // A member handshaken on a stream that goes nowhere, alive.
  Member& Connected(const std::string& id, const std::string& address) {
    auto stream = std::make_shared<NowhereLink>();
    table_.AwaitHello(stream, t0_);
    Member& m = *table_.Admit(stream, HelloFrom(id, 1, address), t0_).member;
    m.address = address;
    m.links.Attach(stream, 0, t0_);
    table_.MarkAlive(m, t0_);
    return m;
  }
  static HeartbeatWriter::Options Options(int member_list_every) {
    return {{"me", 7}, "me:1", member_list_every, seconds(2), milliseconds(100)};
  }
  static VersionMap Vector(std::initializer_list<std::pair<std::string, uint64_t>> entries) {
    VersionMap v;
    for (const auto& [id, seq] : entries) v[OriginKey{id, 1}] = seq;
    return v;
  }

  const Clock::time_point t0_ = Clock::time_point{} + seconds(100);
  MemberTable table_;
};

// A stream that had the previous tick's heartbeat is sent only what changed
// since; one that missed it, or a heartbeat with the member list, the whole
// vector; a vector that went back (a snapshot installed) is sent whole to
// every member.
TEST_F(HeartbeatWriterTest, ChangesOnlyToAStreamThatHadTheLastTicksHeartbeat) {
  HeartbeatWriter writer(Options(/*member_list_every=*/100));
  Member& b = Connected("b", "b:1");
  v1::Heartbeat said;
  said.set_local_steps(42);

  writer.NextTick();
  HeartbeatWriter::Bases bases = writer.Make(said, Vector({{"a", 3}}), /*tick=*/true);
  ASSERT_NE(bases.changes, nullptr);
  std::shared_ptr<const v1::GossipFrame> first = writer.For(b, bases, table_);
  EXPECT_FALSE(first->heartbeat().applied_changes_only()) << "the first carries the member list";
  EXPECT_EQ(first->heartbeat().local_steps(), 42u);
  EXPECT_EQ(FromProto(first->heartbeat().applied()), Vector({{"a", 3}}));
  writer.Sent(b);

  writer.NextTick();
  bases = writer.Make(said, Vector({{"a", 5}, {"b", 1}, {"c", 2}}), /*tick=*/true);
  std::shared_ptr<const v1::GossipFrame> second = writer.For(b, bases, table_);
  EXPECT_TRUE(second->heartbeat().applied_changes_only());
  EXPECT_EQ(second->heartbeat().applied().entries_size(), 3);
  EXPECT_EQ(second->heartbeat().local_steps(), 42u);
  writer.Sent(b);

  writer.NextTick();
  bases = writer.Make(said, Vector({{"a", 6}, {"b", 1}, {"c", 2}}), /*tick=*/true);
  std::shared_ptr<const v1::GossipFrame> third = writer.For(b, bases, table_);
  ASSERT_TRUE(third->heartbeat().applied_changes_only());
  ASSERT_EQ(third->heartbeat().applied().entries_size(), 1) << "only a moved on";
  EXPECT_EQ(third->heartbeat().applied().entries(0).seq(), 6u);
  // Not Sent: the stream misses this tick's, so the next is whole.

  writer.NextTick();
  bases = writer.Make(said, Vector({{"a", 7}, {"b", 1}, {"c", 2}}), /*tick=*/true);
  EXPECT_FALSE(writer.For(b, bases, table_)->heartbeat().applied_changes_only());
  writer.Sent(b);

  writer.NextTick();
  bases = writer.Make(said, Vector({{"a", 7}}), /*tick=*/true);
  EXPECT_EQ(bases.changes, nullptr) << "b and c gone: it went back";
  EXPECT_EQ(FromProto(writer.For(b, bases, table_)->heartbeat().applied()), Vector({{"a", 7}}));

  EXPECT_EQ(writer.Make(said, Vector({{"a", 8}}), /*tick=*/false).changes, nullptr)
      << "outside a tick every member is sent the whole vector";
}

// The member list (us first, then every member that did not leave) goes on
// every member_list_every-th heartbeat of a stream; the origins it applied
// that we refuse go once as found, and all of them with the list.
TEST_F(HeartbeatWriterTest, TheMemberListEveryNthHeartbeatAndTheRefusedOrigins) {
  HeartbeatWriter writer(Options(/*member_list_every=*/3));
  Member& b = Connected("b", "b:1");
  Member& c = Connected("c", "c:1");
  table_.MarkLeft(c);
  b.refused_here = {OriginKey{"x", 1}, OriginKey{"y", 1}};
  b.refused_untold = {OriginKey{"y", 1}};
  const v1::Heartbeat said;
  std::vector<int> lists, refused;
  for (int i = 0; i < 7; ++i) {
    writer.NextTick();
    std::shared_ptr<const v1::GossipFrame> f =
        writer.For(b, writer.Make(said, Vector({{"a", 1}}), true), table_);
    lists.push_back(f->heartbeat().members_size());
    refused.push_back(f->heartbeat().refused_origins_size());
    if (i == 0) {
      ASSERT_EQ(f->heartbeat().members_size(), 2) << "us and b; c left";
      EXPECT_EQ(f->heartbeat().members(0).node_id(), "me");
      EXPECT_EQ(f->heartbeat().members(0).address(), "me:1");
      EXPECT_EQ(f->heartbeat().members(1).node_id(), "b");
      EXPECT_TRUE(f->heartbeat().members(1).heard());
    }
    if (i == 1) b.refused_untold = {OriginKey{"z", 1}};
    writer.Sent(b);
  }
  EXPECT_EQ(lists, (std::vector<int>{2, 0, 0, 2, 0, 0, 2}));
  EXPECT_EQ(refused, (std::vector<int>{2, 0, 1, 2, 0, 0, 2}));
}

// In the mesh every member is due every tick; in a tree our neighbours
// are, the others every failure_timeout / (4 * heartbeat_interval) ticks.
TEST_F(HeartbeatWriterTest, ATreeSendsToNonNeighboursEveryFewTicks) {
  HeartbeatWriter writer(Options(1));
  std::vector<std::string> ids = {"me"};
  for (int i = 0; i < 12; ++i) ids.push_back(absl::StrCat("n", i));
  const Ring ring(ids);
  const Member* neighbour = nullptr;
  const Member* far = nullptr;
  for (int i = 0; i < 12; ++i) {
    Member& m = Connected(absl::StrCat("n", i), absl::StrCat("n", i, ":1"));
    (ring.Neighbours("me", m.node_id) ? neighbour : far) = &m;
  }
  ASSERT_NE(neighbour, nullptr);
  ASSERT_NE(far, nullptr);
  std::vector<int> far_due;
  for (int tick = 1; tick <= 10; ++tick) {
    writer.NextTick();
    EXPECT_TRUE(writer.Due(*far, /*tree=*/false, ring));
    EXPECT_TRUE(writer.Due(*neighbour, /*tree=*/true, ring));
    if (writer.Due(*far, /*tree=*/true, ring)) far_due.push_back(tick);
  }
  EXPECT_EQ(far_due, (std::vector<int>{5, 10})) << "2 s / (4 x 100 ms): every 5th tick";
}

}  // namespace
}  // namespace reckon::server
