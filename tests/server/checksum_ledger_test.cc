// ChecksumLedger: the gossip node's part, tested without sockets (server/checksum_ledger.h).
#include "server/checksum_ledger.h"

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
#include "server/snapshot_cuts.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

// The ledger derives the checksum at any recent vector from per-origin
// running sums: checked here against sums recomputed from scratch.
TEST(ChecksumLedger, DerivesTheChecksumAtAnyVectorItPassed) {
  ChecksumLedger ledger;
  const uint64_t initial = 1000;
  ledger.Reset(initial, {});
  auto contribution = [](const OriginKey& o, uint64_t seq) {
    return (o == kA ? 0x9E3779B97F4A7C15ull : 0xBF58476D1CE4E5B9ull) * (seq + 3);
  };
  for (uint64_t seq = 1; seq <= 30; ++seq) {
    ledger.Add(kA, seq, contribution(kA, seq));
    if (seq <= 12) ledger.Add(kB, seq, contribution(kB, seq));
  }
  auto from_scratch = [&](uint64_t a, uint64_t b) {
    uint64_t sum = initial;
    for (uint64_t s = 1; s <= a; ++s) sum += contribution(kA, s);
    for (uint64_t s = 1; s <= b; ++s) sum += contribution(kB, s);
    return sum;
  };
  EXPECT_EQ(ledger.total(), from_scratch(30, 12));
  for (uint64_t a = 0; a <= 30; a += 5) {
    for (uint64_t b = 0; b <= 12; b += 3) {
      VersionMap v;
      if (a > 0) v[kA] = a;
      if (b > 0) v[kB] = b;
      ASSERT_TRUE(ledger.Passed(v));
      EXPECT_EQ(ledger.At(v), std::optional<uint64_t>(from_scratch(a, b))) << a << " " << b;
    }
  }
  // Ahead of us: not passed, not derivable (yet).
  EXPECT_FALSE(ledger.Passed({{kB, 13}}));
  EXPECT_EQ(ledger.At({{kB, 13}}), std::nullopt);
  const OriginKey unknown{"c", 1};
  EXPECT_FALSE(ledger.Passed({{unknown, 1}}));
  EXPECT_EQ(ledger.At({{unknown, 1}}), std::nullopt);
}

TEST(ChecksumLedger, ForgetsWhatIsBeforeItsHistoryOrItsSnapshot) {
  ChecksumLedger ledger(/*history_per_origin=*/4);
  ledger.Reset(7, {{kA, 10}});  // a snapshot cut at a:10
  for (uint64_t seq = 11; seq <= 20; ++seq) ledger.Add(kA, seq, 1);
  EXPECT_EQ(ledger.total(), 17u);
  EXPECT_EQ(ledger.At({{kA, 20}}), std::optional<uint64_t>(17));
  EXPECT_EQ(ledger.At({{kA, 16}}), std::optional<uint64_t>(13));
  // Passed, but out of the last 4 seqs kept: for good not derivable.
  EXPECT_TRUE(ledger.Passed({{kA, 15}}));
  EXPECT_EQ(ledger.At({{kA, 15}}), std::nullopt);
  // Nothing before the cut, and an origin the cut held cannot be "absent".
  ChecksumLedger fresh;
  fresh.Reset(7, {{kA, 10}});
  EXPECT_EQ(fresh.At({{kA, 10}}), std::optional<uint64_t>(7));
  EXPECT_EQ(fresh.At({{kA, 9}}), std::nullopt);
  EXPECT_EQ(fresh.At({}), std::nullopt);
}

}  // namespace
}  // namespace reckon::server
