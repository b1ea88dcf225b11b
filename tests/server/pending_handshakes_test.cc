// PendingHandshakes: the gossip node's part, tested without sockets (server/pending_handshakes.h).
#include "server/pending_handshakes.h"

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

TEST(PendingHandshakes, SilentAcceptedStreamsTimeOutAndTheOldestMakeRoom) {
  PendingHandshakes pending({/*cap=*/3, /*hello_timeout=*/std::chrono::seconds(10)});
  const Clock::time_point t0{};
  auto ours = std::make_shared<NullLink>();  // dialed: the dial schedule's deadline bounds it
  std::vector<std::shared_ptr<Link>> accepted;
  for (int i = 0; i < 4; ++i) accepted.push_back(std::make_shared<NowhereLink>());
  EXPECT_TRUE(pending.Add(ours, t0).empty());
  EXPECT_TRUE(pending.Add(accepted[0], t0 + milliseconds(1)).empty());
  EXPECT_TRUE(pending.Add(accepted[1], t0 + milliseconds(2)).empty());
  EXPECT_TRUE(pending.Add(accepted[1], t0 + milliseconds(3)).empty());  // held already
  // Past the cap the oldest accepted stream goes, never our dial.
  EXPECT_EQ(pending.Add(accepted[2], t0 + milliseconds(4)),
            std::vector<std::shared_ptr<Link>>{accepted[0]});
  EXPECT_FALSE(pending.Contains(accepted[0]));
  EXPECT_TRUE(pending.Contains(ours));
  EXPECT_EQ(pending.size(), 3u);
  // A Hello arrived on one: it no longer waits.
  EXPECT_TRUE(pending.Remove(accepted[1]));
  EXPECT_FALSE(pending.Remove(accepted[1]));
  EXPECT_TRUE(pending.Add(accepted[3], t0 + milliseconds(5)).empty());
  // Only accepted streams time out, and only past the timeout.
  EXPECT_TRUE(pending.TakeExpired(t0 + std::chrono::seconds(10)).empty());
  const std::vector<std::shared_ptr<Link>> expired =
      pending.TakeExpired(t0 + std::chrono::seconds(11));
  EXPECT_EQ(std::set<std::shared_ptr<Link>>(expired.begin(), expired.end()),
            (std::set<std::shared_ptr<Link>>{accepted[2], accepted[3]}));
  EXPECT_EQ(pending.All(), std::vector<std::shared_ptr<Link>>{ours});
  // A cap full of our own dials: a new accepted stream is the one closed.
  PendingHandshakes full({1, std::chrono::seconds(10)});
  EXPECT_TRUE(full.Add(ours, t0).empty());
  EXPECT_EQ(full.Add(accepted[0], t0), std::vector<std::shared_ptr<Link>>{accepted[0]});
}

}  // namespace
}  // namespace reckon::server
