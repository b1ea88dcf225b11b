// Striped snapshots and the cuts being served: the gossip node's part,
// tested without sockets (server/snapshot_cuts.h).
#include "server/snapshot_cuts.h"

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
#include "server/quiescence.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// Snapshot stripes: source and joiner compute the same ranges, which tile
// the weights exactly, for any model size (the 14.6M of Strom's model and
// sizes near 2^64 / 16 included).
TEST(SnapshotStripes, TheStripesTileTheWeightsInOrderWithSizesAtMostOneApart) {
  for (uint64_t params : {uint64_t{0}, uint64_t{1}, uint64_t{7}, uint64_t{1000},
                          uint64_t{14'600'000}, uint64_t{1} << 60}) {
    for (uint32_t stripes = 1; stripes <= kMaxSnapshotStripes; ++stripes) {
      uint64_t next = 0, smallest = UINT64_MAX, largest = 0;
      for (uint32_t i = 0; i < stripes; ++i) {
        const ParamRange r = StripeRange(params, stripes, i);
        EXPECT_EQ(r.begin, next) << params << " in " << stripes << ", stripe " << i;
        ASSERT_LE(r.begin, r.end);
        smallest = std::min(smallest, r.end - r.begin);
        largest = std::max(largest, r.end - r.begin);
        next = r.end;
      }
      EXPECT_EQ(next, params) << params << " in " << stripes;
      EXPECT_LE(largest - smallest, 1u) << params << " in " << stripes;
    }
  }
}

TEST(SnapshotStripes, AJoinerAsksForStripesOfAtLeastOneMebibyte) {
  EXPECT_EQ(StripesFor(1000, 4), 1u);        // 8 KB: one stream
  EXPECT_EQ(StripesFor(669'706, 4), 4u);     // the default model, 5.4 MB
  EXPECT_EQ(StripesFor(300'000, 4), 2u);     // 2.4 MB
  EXPECT_EQ(StripesFor(14'600'000, 4), 4u);  // Strom's model
  EXPECT_EQ(StripesFor(14'600'000, 100), kMaxSnapshotStripes);
  EXPECT_EQ(StripesFor(14'600'000, 0), 1u);
}

SnapshotCut CutIn(uint32_t stripes) {
  SnapshotCut cut;
  cut.header.set_stripes(stripes);
  cut.header.set_param_count(4);
  cut.weights = {1, 2, 3, 4};
  return cut;
}

TEST(SnapshotCuts, ACutIsKeptUntilEachOfItsStripesWasAskedFor) {
  SnapshotCuts cuts(4, std::chrono::seconds(60));
  const auto now = SnapshotCuts::Clock::now();
  const std::shared_ptr<const SnapshotCut> cut = cuts.Keep(CutIn(3), now);
  const uint64_t id = cut->header.cut_id();
  EXPECT_NE(id, 0u);
  EXPECT_EQ(cut->header.stripe(), 0u);
  EXPECT_EQ(cuts.size(), 1u);
  EXPECT_EQ(cuts.Take(id, 0, now).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuts.Take(id, 3, now).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cuts.Take(id + 1, 1, now).status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::shared_ptr<const SnapshotCut>> two = cuts.Take(id, 2, now);
  ASSERT_TRUE(two.ok()) << two.status();
  EXPECT_EQ(two->get(), cut.get());         // the same cut, not a copy
  ASSERT_TRUE(cuts.Take(id, 2, now).ok());  // a stripe asked again (a retry) while kept
  ASSERT_TRUE(cuts.Take(id, 1, now).ok());
  EXPECT_EQ(cuts.size(), 0u);  // every stripe asked: the copy is let go
  EXPECT_EQ(cuts.Take(id, 1, now).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(cuts.Keep(CutIn(1), now)->header.stripes(), 1u);
  EXPECT_EQ(cuts.size(), 0u) << "one stripe: nothing to keep";
}

TEST(SnapshotCuts, FewCutsAreKeptAndNoneForLongerThanItsTtl) {
  SnapshotCuts cuts(2, std::chrono::seconds(60));
  const auto t0 = SnapshotCuts::Clock::now();
  std::set<uint64_t> ids;
  std::vector<uint64_t> order;
  for (int i = 0; i < 3; ++i) {
    const uint64_t id = cuts.Keep(CutIn(2), t0 + std::chrono::seconds(i))->header.cut_id();
    ids.insert(id);
    order.push_back(id);
  }
  EXPECT_EQ(ids.size(), 3u);
  EXPECT_EQ(cuts.size(), 2u);
  const auto t3 = t0 + std::chrono::seconds(3);
  EXPECT_EQ(cuts.Take(order[0], 1, t3).status().code(), absl::StatusCode::kNotFound)
      << "the oldest went for the newest";
  // Cut 1 was made at t0 + 1 s: gone at t0 + 61 s, while cut 2 is still kept.
  EXPECT_EQ(cuts.Take(order[1], 1, t0 + std::chrono::seconds(61)).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_TRUE(cuts.Take(order[2], 1, t0 + std::chrono::seconds(61)).ok());
}

}  // namespace
}  // namespace reckon::server
