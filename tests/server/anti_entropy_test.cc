// AntiEntropy: the gossip node's part, tested without sockets (server/anti_entropy.h).
#include "server/anti_entropy.h"

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
#include "server/snapshot_cuts.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"
#include "tests/server/parts_test_util.h"
#include "tests/update_frame.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(AntiEntropy, SendsWhatTheMemberLacksFromWhatItHasOrWasSent) {
  // Nothing: it has all we have, or we sent it all on this stream.
  EXPECT_EQ(PlanRepair(10, 10, 0, 1, false).kind, RepairPlan::kNothing);
  EXPECT_EQ(PlanRepair(10, 4, 10, 1, false).kind, RepairPlan::kNothing);
  EXPECT_EQ(PlanRepair(10, 4, 0, 0, false).kind, RepairPlan::kNothing);  // empty log
  // From the further of what it applied and what we pushed, up to ours.
  RepairPlan p = PlanRepair(10, 4, 7, 1, false);
  EXPECT_EQ(p.kind, RepairPlan::kSend);
  EXPECT_EQ(p.first, 8u);
  EXPECT_EQ(p.last, 10u);
  p = PlanRepair(10, 4, 0, 5, false);  // the log starts exactly where it needs
  EXPECT_EQ(p.kind, RepairPlan::kSend);
  EXPECT_EQ(p.first, 5u);
}

TEST(AntiEntropy, TellsAMemberBehindTheLogToRejoinOnce) {
  RepairPlan p = PlanRepair(100, 3, 0, 50, false);
  EXPECT_EQ(p.kind, RepairPlan::kRejoin);
  EXPECT_EQ(p.first, 50u);
  EXPECT_EQ(PlanRepair(100, 3, 0, 50, true).kind, RepairPlan::kNothing);  // told already
  // What we pushed may still fill the gap: no rejoin while that is possible,
  // and nothing to send from the log either.
  EXPECT_EQ(PlanRepair(100, 3, 60, 80, false).kind, RepairPlan::kRejoin);
  EXPECT_EQ(PlanRepair(100, 49, 60, 80, false).kind, RepairPlan::kRejoin);
  EXPECT_EQ(PlanRepair(100, 49, 60, 50, false).kind, RepairPlan::kSend);
}

TEST(AntiEntropy, RelaysALiveOriginsMessagesOnlyToAMemberThatDoesNotHearIt) {
  const milliseconds repair(200), failure(3000);
  const milliseconds young(100), aged(3000), fresh(100), settled(3000);
  // Our own: at once.
  EXPECT_TRUE(MayRelay(true, true, true, Clock::duration::zero(), fresh, repair, failure));
  // A dead origin's: once a repair timeout old, whoever the member hears.
  EXPECT_FALSE(MayRelay(false, false, false, young, settled, repair, failure));
  EXPECT_TRUE(MayRelay(false, false, true, repair, fresh, repair, failure));
  // A live origin's: never to a member that hears it (its own copy is on
  // its way, however slow the link)...
  EXPECT_FALSE(MayRelay(false, true, true, aged * 10, settled, repair, failure));
  // ...else once a failure timeout old and a failure timeout after the
  // member came (time to reach the origin itself).
  EXPECT_FALSE(MayRelay(false, true, false, young, settled, repair, failure));
  EXPECT_FALSE(MayRelay(false, true, false, aged, fresh, repair, failure));
  EXPECT_TRUE(MayRelay(false, true, false, aged, settled, repair, failure));
}

TEST(AntiEntropy, TheTreeSendsToAChildAtOnceAndOurOwnElsewhereOnlyAsTheBackstop) {
  const milliseconds repair(200), failure(3000);
  const milliseconds young(100), aged(3000), fresh(100), settled(3000);
  // A child in the origin's tree: at once, ours or relayed.
  EXPECT_TRUE(
      MayRelayInTree(true, true, true, true, Clock::duration::zero(), fresh, repair, failure));
  EXPECT_TRUE(
      MayRelayInTree(true, false, true, true, Clock::duration::zero(), fresh, repair, failure));
  // Our own to another member: its parent serves it; we step in only once
  // it is a failure timeout old (not a repair timeout: a slow parent is not
  // a failed one) and the member has been with us as long.
  EXPECT_FALSE(MayRelayInTree(false, true, true, true, repair, settled, repair, failure));
  EXPECT_FALSE(MayRelayInTree(false, true, true, true, aged, fresh, repair, failure));
  EXPECT_TRUE(MayRelayInTree(false, true, true, true, aged, settled, repair, failure));
  // Others' as in the mesh: a live origin is their backstop.
  EXPECT_FALSE(MayRelayInTree(false, false, true, true, aged * 10, settled, repair, failure));
  EXPECT_FALSE(MayRelayInTree(false, false, false, false, young, settled, repair, failure));
  EXPECT_TRUE(MayRelayInTree(false, false, false, false, repair, settled, repair, failure));
}

}  // namespace
}  // namespace reckon::server
