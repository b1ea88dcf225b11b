// MessageLog: the gossip node's part, tested without sockets (server/message_log.h).
#include "server/message_log.h"

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

TEST(MessageLog, ByteCapEvictsTheOldestFirstAcrossOrigins) {
  // Every frame of these is as big, and both origins' ids as long.
  const size_t one = MessageLog::MemoryOf(kA, *UpdateFrame(kA, 1));
  const size_t origin = MessageLog::MemoryOfOrigin(kA);
  EXPECT_GT(one, UpdateFrame(kA, 1)->ByteSizeLong());
  MessageLog log(3 * one + 2 * origin, milliseconds(0));
  const auto now = Clock::now();
  log.Add(kA, UpdateFrame(kA, 1), now);
  log.Add(kB, UpdateFrame(kB, 1), now);
  log.Add(kA, UpdateFrame(kA, 2), now);
  EXPECT_EQ(log.messages(), 3u);
  log.Add(kB, UpdateFrame(kB, 2), now);  // over the cap: a#1 goes
  EXPECT_EQ(log.messages(), 3u);
  EXPECT_EQ(log.bytes(), 3 * one + 2 * origin);
  ASSERT_NE(log.Find(kA), nullptr);
  EXPECT_EQ(log.Find(kA)->begin()->first, 2u);
  EXPECT_EQ(log.Find(kB)->size(), 2u);
}

TEST(MessageLog, CollectKeepsWhatSomeoneLacksAndWhatIsRecent) {
  MessageLog log(1 << 20, milliseconds(1000));
  const auto t0 = Clock::now();
  for (uint64_t s = 1; s <= 5; ++s) log.Add(kA, UpdateFrame(kA, s), t0);
  // Everyone has 3, but the retention has not passed: all kept.
  log.Collect({{kA, 3}}, t0 + milliseconds(500));
  EXPECT_EQ(log.messages(), 5u);
  // Retention passed: 1..3 go, 4 and 5 (someone lacks them) stay.
  log.Collect({{kA, 3}}, t0 + milliseconds(1500));
  ASSERT_NE(log.Find(kA), nullptr);
  EXPECT_EQ(log.Find(kA)->begin()->first, 4u);
  EXPECT_EQ(log.messages(), 2u);
  log.Collect({{kB, 9}}, t0 + milliseconds(1500));  // another origin's floor: a's stay
  EXPECT_EQ(log.messages(), 2u);
  log.Collect({{kA, 5}}, t0 + milliseconds(1500));
  EXPECT_EQ(log.Find(kA), nullptr);
  EXPECT_EQ(log.bytes(), 0u);
}

TEST(MessageLog, AddingASeqAgainReplacesIt) {
  MessageLog log(1 << 20, milliseconds(0));
  log.Add(kA, UpdateFrame(kA, 1, 10), Clock::now());
  log.Add(kA, UpdateFrame(kA, 1, 100), Clock::now());
  EXPECT_EQ(log.messages(), 1u);
  EXPECT_EQ(log.bytes(),
            MessageLog::MemoryOf(kA, *UpdateFrame(kA, 1, 100)) + MessageLog::MemoryOfOrigin(kA));
}

// The same for the message log: its cap is on memory held, not wire bytes.
TEST(MessageLog, WhatItCountsIsWhatTheAllocatorGaveOut) {
#ifdef RECKON_UNDER_ASAN
  GTEST_SKIP() << "under AddressSanitizer: its allocator is not the one mallinfo2 reports";
#endif
  std::mt19937_64 rng(4);
  for (const HeldShape& shape : kHeldShapes) {
    MessageLog log(size_t{1} << 30, milliseconds(0));
    const auto now = Clock::now();
    const size_t before = HeapInUse();
    for (int i = 0; i < 8000; ++i) {
      const std::string id = InventedId(i, shape.id_length);
      for (int k = 0; k < shape.per_origin; ++k) {
        log.Add(OriginKey{id, 1}, ArrivalReceived(id, 1 + k, shape.updates, rng).frame, now);
      }
    }
    const double real = double(HeapInUse() - before);
    const double counted = double(log.bytes());
    std::printf("FIGURES message log, %s: %.0f bytes each allocated, %.0f counted (%.3fx)\n",
                shape.name, real / log.messages(), counted / log.messages(), real / counted);
    EXPECT_LE(real, 1.25 * counted) << shape.name;
    EXPECT_GE(real, 0.8 * counted) << shape.name;
  }
}

}  // namespace
}  // namespace reckon::server
