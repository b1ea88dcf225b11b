// Inbox: the gossip node's part, tested without sockets (server/inbox.h).
#include "server/inbox.h"

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/anti_entropy.h"
#include "server/applied_state.h"
#include "server/checksum_ledger.h"
#include "server/dial_schedule.h"
#include "server/early_arrivals.h"
#include "server/held_bytes.h"
#include "server/joiners.h"
#include "server/lanes.h"
#include "server/member_table.h"
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
using testing::Eventually;
using testing::ManualClock;

// Frames of `bytes` serialized bytes (a Heartbeat padded with a hash).
v1::GossipFrame FrameOf(size_t bytes) {
  v1::GossipFrame f;
  f.mutable_heartbeat()->set_weight_hash(std::string(bytes, 'x'));
  f.mutable_heartbeat()->set_weight_hash(std::string(bytes - (f.ByteSizeLong() - bytes), 'x'));
  EXPECT_EQ(f.ByteSizeLong(), bytes);
  return f;
}

// The inbox keeps arrival order across links, pauses a link once its frames
// waiting pass its share of the cap (the cap over the links with frames
// waiting), hands the paused ones back with the batch that holds their
// frames, and after Stop takes nothing and remembers which links closed.
// A batch is validated in slices whose decoded form stays under a cap: a
// onebit message decodes to 8 bytes a parameter, 64x its frame.
TEST(Inbox, ASliceKeepsTheDecodedFormUnderItsCapAndTakesAtLeastOne) {
  constexpr uint64_t kParamCount = 1000;
  auto update = [](v1::Codec codec, uint32_t count) {
    Inbox::Event e{Inbox::Event::kFrame, nullptr, {}, {}, 0, std::nullopt};
    e.frame.mutable_update()->set_codec(codec);
    e.frame.mutable_update()->set_count(count);
    return e;
  };
  std::deque<Inbox::Event> events;
  events.push_back(update(v1::CODEC_ONEBIT, 0));             // 8,000 bytes decoded
  events.push_back(update(v1::CODEC_THRESHOLD_RICE, 500));   // 2,000
  events.push_back(update(v1::CODEC_THRESHOLD_RICE, 9999));  // claims more: 4,000 at most
  events.push_back(Inbox::Event{Inbox::Event::kUp, nullptr, {}, {}, 0, std::nullopt});  // 0
  events.push_back(update(v1::CODEC_DENSE_FP32, 0));                                    // 8,000
  std::vector<size_t> sizes;
  std::vector<size_t> decoded;
  while (!events.empty()) {
    const Slice slice = TakeSlice(&events, kParamCount, 10'000);
    sizes.push_back(slice.events.size());
    decoded.push_back(slice.decoded_bytes);
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{2, 2, 1}));
  EXPECT_EQ(decoded, (std::vector<size_t>{10'000, 4'000, 8'000}));
  // One event over the cap still goes, alone.
  events.push_back(update(v1::CODEC_ONEBIT, 0));
  events.push_back(update(v1::CODEC_ONEBIT, 0));
  EXPECT_EQ(TakeSlice(&events, kParamCount, 100).events.size(), 1u);
  EXPECT_EQ(events.size(), 1u);
  EXPECT_TRUE(TakeSlice(&events, kParamCount, 100).events.size() == 1 && events.empty());
  EXPECT_TRUE(TakeSlice(&events, kParamCount, 100).events.empty()) << "nothing to take";
}

TEST(Inbox, KeepsOrderPausesALinkOverItsShareAndStops) {
  // What the cap counts is each frame's memory, a little over its size.
  auto m = [](size_t bytes) { return Inbox::MemoryOf(FrameOf(bytes)); };
  EXPECT_GT(m(100), 100u);
  Inbox inbox(/*byte_cap=*/2 * (m(400) + m(100)), [] { return Clock::now(); });
  auto a = std::make_shared<NowhereLink>(), b = std::make_shared<NowhereLink>();
  inbox.PushUp(a);
  EXPECT_TRUE(inbox.PushFrame(a, FrameOf(600)));   // a alone: its share is the cap
  EXPECT_TRUE(inbox.PushFrame(b, FrameOf(400)));   // two links: half each
  EXPECT_FALSE(inbox.PushFrame(a, FrameOf(100)));  // a holds 600 + 100 > half: paused
  EXPECT_TRUE(inbox.PushFrame(b, FrameOf(100)));   // b holds 400 + 100, half: not over
  EXPECT_EQ(inbox.bytes(), m(600) + m(400) + 2 * m(100));
  EXPECT_EQ(inbox.pauses(), 1u);
  EXPECT_EQ(inbox.LastArrivals().size(), 2u);
  Inbox::Batch batch;
  ASSERT_TRUE(inbox.Take(Clock::now(), &batch));
  ASSERT_EQ(batch.events.size(), 5u);
  EXPECT_EQ(batch.events[0].kind, Inbox::Event::kUp);
  const std::vector<std::pair<Link*, size_t>> frames = {
      {a.get(), 600}, {b.get(), 400}, {a.get(), 100}, {b.get(), 100}};
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(batch.events[i + 1].link.get(), frames[i].first) << i;
    EXPECT_EQ(batch.events[i + 1].frame_bytes, frames[i].second) << i;
  }
  EXPECT_EQ(batch.to_resume, std::vector<std::shared_ptr<Link>>{a});
  EXPECT_EQ(inbox.bytes(), 0u);
  // Emptied: shares start again from the links with frames waiting.
  EXPECT_TRUE(inbox.PushFrame(a, FrameOf(900)));
  // Nothing queued: Take waits until `wake` and hands out nothing.
  Inbox::Batch rest, none;
  ASSERT_TRUE(inbox.Take(Clock::now(), &rest));
  const auto before = Clock::now();
  ASSERT_TRUE(inbox.Take(before + milliseconds(20), &none));
  EXPECT_GE(Clock::now() - before, milliseconds(20));
  EXPECT_TRUE(none.events.empty());
  inbox.Forget(a.get());
  EXPECT_EQ(inbox.LastArrivals().size(), 1u);
  // Closes before Stop are not remembered; after it they are.
  inbox.PushClosed(a, "gone");
  inbox.Stop();
  inbox.PushClosed(b, "gone");
  EXPECT_FALSE(inbox.ClosedSinceStop({a, b}));
  EXPECT_TRUE(inbox.ClosedSinceStop({b}));
  Inbox::Batch after;
  EXPECT_FALSE(inbox.Take(Clock::now() + std::chrono::hours(1), &after));
  EXPECT_TRUE(after.events.empty());
}

// IdleForTesting (what a test stepping a manual clock waits for): idle only
// while the node thread waits in Take with nothing queued, not woken, and
// its wake still ahead on the clock; the count says how many events have
// arrived. Stopped counts as idle.
TEST(Inbox, IsIdleOnlyWhileItsThreadWaitsWithNothingToHandle) {
  ManualClock clock;
  Inbox inbox(/*byte_cap=*/1 << 20, clock.Function(), /*max_wait=*/milliseconds(1));
  EXPECT_FALSE(inbox.IdleForTesting()) << "nobody waits in Take";
  auto link = std::make_shared<NowhereLink>();
  std::atomic<int> takes{0};
  std::vector<size_t> taken;  // events a Take handed out (the taker's, read after join)
  auto take_once = [&] {
    Inbox::Batch batch;
    EXPECT_TRUE(inbox.Take(clock.Now() + milliseconds(20), &batch));
    taken.push_back(batch.events.size());
    ++takes;
  };
  std::thread first(take_once);
  ASSERT_TRUE(Eventually([&] { return inbox.IdleForTesting() == 0u; }));
  inbox.PushFrame(link, FrameOf(100));
  EXPECT_FALSE(inbox.IdleForTesting()) << "a frame arrived: queued, or taken and handled";
  first.join();
  EXPECT_FALSE(inbox.IdleForTesting()) << "handled, and nobody waits again yet";
  std::thread second(take_once);
  ASSERT_TRUE(Eventually([&] { return inbox.IdleForTesting() == 1u; }));
  inbox.Wake();
  EXPECT_FALSE(inbox.IdleForTesting()) << "woken for work of its own";
  second.join();
  std::thread third(take_once);
  ASSERT_TRUE(Eventually([&] { return inbox.IdleForTesting() == 1u; }));
  clock.Advance(milliseconds(20));
  EXPECT_FALSE(inbox.IdleForTesting()) << "its wake has come: it is to tick";
  third.join();
  EXPECT_EQ(takes.load(), 3);
  EXPECT_EQ(taken, (std::vector<size_t>{1, 0, 0}));
  inbox.Stop();
  EXPECT_EQ(inbox.IdleForTesting(), 1u);
}

}  // namespace
}  // namespace reckon::server
