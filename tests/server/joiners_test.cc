// Joiners: the gossip node's part, tested without sockets (server/joiners.h).
#include "server/joiners.h"

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

// A worker that asked for a snapshot is waited for until it has arrived
// (a member of that incarnation, handshaken) or has been silent a failure
// timeout; at most `cap` are noted, so made-up requesters cannot grow it.
TEST(Joiners, WaitedForUntilTheyArriveOrGoSilentAndCapped) {
  const Clock::time_point t0 = Clock::now();
  Joiners joiners(2, std::chrono::seconds(3));
  EXPECT_EQ(joiners.Note("a", 7, t0), Joiners::Noted::kNew);
  EXPECT_EQ(joiners.Note("b", 1, t0), Joiners::Noted::kNew);
  EXPECT_EQ(joiners.Note("c", 1, t0), Joiners::Noted::kFull);
  EXPECT_EQ(joiners.Note("a", 8, t0 + std::chrono::seconds(2)), Joiners::Noted::kAgain);
  MemberMap members;
  EXPECT_EQ(joiners.StillComing(members, t0), (std::vector<std::string>{"a", "b"}));
  // a's old incarnation is a member: not the one on its way. b arrived.
  members["a"] = Member{};
  members["a"].incarnation = 7;
  MemberTestAccess::SetState(members["a"], MemberState::kAlive);
  members["b"] = Member{};
  members["b"].incarnation = 1;
  MemberTestAccess::SetState(members["b"], MemberState::kConnecting);  // known, not reached yet
  EXPECT_EQ(joiners.StillComing(members, t0), (std::vector<std::string>{"a", "b"}));
  MemberTestAccess::SetState(members["b"], MemberState::kAlive);
  EXPECT_EQ(joiners.StillComing(members, t0), (std::vector<std::string>{"a"}));
  // a asked last at 2 s: waited for until 5 s, not after.
  EXPECT_EQ(joiners.StillComing(members, t0 + std::chrono::seconds(5)),
            (std::vector<std::string>{"a"}));
  EXPECT_TRUE(joiners.StillComing(members, t0 + std::chrono::milliseconds(5001)).empty());
  EXPECT_TRUE(joiners.all().empty());
  EXPECT_EQ(joiners.Note("c", 1, t0), Joiners::Noted::kNew);  // room again
}

}  // namespace
}  // namespace reckon::server
