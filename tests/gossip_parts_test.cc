// The gossip node's parts on their own (no node, no links): the message log
// and the early-arrival buffer.
#include <gtest/gtest.h>

#include <memory>

#include "server/early_arrivals.h"
#include "server/message_log.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;

const OriginKey kA{"a", 1}, kB{"b", 1};

// An Update frame of `origin` with `seq` and a payload of `payload` bytes.
std::shared_ptr<const v1::GossipFrame> Frame(const OriginKey& origin, uint64_t seq,
                                             size_t payload = 10) {
  auto f = std::make_shared<v1::GossipFrame>();
  f->mutable_update()->mutable_origin()->set_node_id(origin.node_id);
  f->mutable_update()->mutable_origin()->set_incarnation(origin.incarnation);
  f->mutable_update()->set_seq(seq);
  f->mutable_update()->set_payload(std::string(payload, 'x'));
  return f;
}

TEST(MessageLog, ByteCapEvictsTheOldestFirstAcrossOrigins) {
  const size_t one = Frame(kA, 1)->ByteSizeLong();
  MessageLog log(3 * one, milliseconds(0));
  const auto now = Clock::now();
  log.Add(kA, Frame(kA, 1), now);
  log.Add(kB, Frame(kB, 1), now);
  log.Add(kA, Frame(kA, 2), now);
  EXPECT_EQ(log.messages(), 3u);
  log.Add(kB, Frame(kB, 2), now);  // over the cap: a#1 goes
  EXPECT_EQ(log.messages(), 3u);
  EXPECT_EQ(log.bytes(), 3 * one);
  ASSERT_NE(log.Find(kA), nullptr);
  EXPECT_EQ(log.Find(kA)->begin()->first, 2u);
  EXPECT_EQ(log.Find(kB)->size(), 2u);
}

TEST(MessageLog, CollectKeepsWhatSomeoneLacksAndWhatIsRecent) {
  MessageLog log(1 << 20, milliseconds(1000));
  const auto t0 = Clock::now();
  for (uint64_t s = 1; s <= 5; ++s) log.Add(kA, Frame(kA, s), t0);
  // Everyone has 3, but the retention has not passed: all kept.
  log.Collect([](const OriginKey&) { return 3; }, t0 + milliseconds(500));
  EXPECT_EQ(log.messages(), 5u);
  // Retention passed: 1..3 go, 4 and 5 (someone lacks them) stay.
  log.Collect([](const OriginKey&) { return 3; }, t0 + milliseconds(1500));
  ASSERT_NE(log.Find(kA), nullptr);
  EXPECT_EQ(log.Find(kA)->begin()->first, 4u);
  EXPECT_EQ(log.messages(), 2u);
  log.Collect([](const OriginKey&) { return 5; }, t0 + milliseconds(1500));
  EXPECT_EQ(log.Find(kA), nullptr);
  EXPECT_EQ(log.bytes(), 0u);
}

TEST(MessageLog, AddingASeqAgainReplacesIt) {
  MessageLog log(1 << 20, milliseconds(0));
  log.Add(kA, Frame(kA, 1, 10), Clock::now());
  log.Add(kA, Frame(kA, 1, 100), Clock::now());
  EXPECT_EQ(log.messages(), 1u);
  EXPECT_EQ(log.bytes(), Frame(kA, 1, 100)->ByteSizeLong());
}

EarlyArrivals::Arrival Arrive(const OriginKey& origin, uint64_t seq, size_t payload = 10) {
  return {Frame(origin, seq, payload), std::make_shared<codec::DecodedUpdate>()};
}

TEST(EarlyArrivals, HandsOutInOrderAndForgetsStale) {
  EarlyArrivals early(8, 1 << 20);
  for (uint64_t s : {5, 3, 4, 7}) EXPECT_TRUE(early.Keep(kA, s, Arrive(kA, s)));
  EXPECT_TRUE(early.Holds(kA, 4));
  EXPECT_FALSE(early.TakeNext(kA, 1).has_value());  // 2 is missing
  // 2 applied: 3, 4, 5 come out in order, then the gap at 6 stops it.
  uint64_t applied = 2;
  while (auto next = early.TakeNext(kA, applied)) {
    EXPECT_EQ(next->frame->update().seq(), applied + 1);
    ++applied;
  }
  EXPECT_EQ(applied, 5u);
  // A snapshot jumped past 7: it is stale and forgotten.
  EXPECT_FALSE(early.TakeNext(kA, 9).has_value());
  EXPECT_EQ(early.size(), 0u);
  EXPECT_EQ(early.bytes(), 0u);
}

TEST(EarlyArrivals, FullOriginGivesUpItsFarthest) {
  EarlyArrivals early(2, 1 << 20);
  EXPECT_TRUE(early.Keep(kA, 10, Arrive(kA, 10)));
  EXPECT_TRUE(early.Keep(kA, 20, Arrive(kA, 20)));
  EXPECT_FALSE(early.Keep(kA, 30, Arrive(kA, 30)));  // the farthest itself
  EXPECT_TRUE(early.Keep(kA, 5, Arrive(kA, 5)));     // nearer: 20 goes
  EXPECT_TRUE(early.Holds(kA, 5));
  EXPECT_TRUE(early.Holds(kA, 10));
  EXPECT_FALSE(early.Holds(kA, 20));
  EXPECT_TRUE(early.Keep(kB, 7, Arrive(kB, 7)));  // another origin has its own room
}

// A peer inventing origins cannot grow the buffer past its byte cap, nor
// evict another origin's arrivals to make room.
TEST(EarlyArrivals, ByteCapHoldsAgainstInventedOrigins) {
  const size_t one = Frame(kA, 2, 1000)->ByteSizeLong();
  EarlyArrivals early(4096, 10 * one + one / 2);
  EXPECT_TRUE(early.Keep(kA, 2, Arrive(kA, 2, 1000)));
  int kept = 0;
  for (int i = 0; i < 1000; ++i) {
    const OriginKey invented{"evil", static_cast<uint64_t>(i)};
    kept += early.Keep(invented, 2, Arrive(invented, 2, 1000));
  }
  EXPECT_EQ(kept, 9);
  EXPECT_LE(early.bytes(), 10 * one + one / 2);
  EXPECT_TRUE(early.Holds(kA, 2));
  EXPECT_FALSE(early.Keep(kA, 3, Arrive(kA, 3, 20 * one)));  // larger than the cap
}

}  // namespace
}  // namespace reckon::server
