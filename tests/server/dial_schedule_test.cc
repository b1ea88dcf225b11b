// DialSchedule: the gossip node's part, tested without sockets (server/dial_schedule.h).
#include "server/dial_schedule.h"

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

TEST(DialSchedule, BacksOffWithJitterAndResetsOnAHandshake) {
  DialSchedule dial({milliseconds(100), milliseconds(800), std::chrono::seconds(6)}, 1);
  const Clock::time_point t0{};
  auto never = [](const std::string&) { return false; };
  dial.Learn("a:1", t0);
  dial.Learn("a:1", t0);  // known already
  dial.MarkSelf("me:1");
  dial.Learn("me:1", t0);  // ours: never dialed
  EXPECT_EQ(dial.Due(t0, never), std::vector<std::string>{"a:1"});
  auto link = std::make_shared<NullLink>();
  dial.Dialed("a:1", link, t0);
  EXPECT_TRUE(dial.Due(t0 + std::chrono::seconds(1), never).empty()) << "one dial in flight";
  dial.Closed(link);
  // Each failed dial doubles the wait, to the cap, within +-25%: never due
  // before 3/4 of it, always after 5/4.
  Clock::time_point t = t0;
  for (int backoff_ms : {100, 200, 400, 800, 800}) {
    EXPECT_TRUE(dial.Due(t + milliseconds(backoff_ms * 3 / 4 - 1), never).empty()) << backoff_ms;
    t += milliseconds(backoff_ms * 5 / 4 + 1);
    ASSERT_EQ(dial.Due(t, never).size(), 1u) << backoff_ms;
    dial.Dialed("a:1", link, t);
    dial.Closed(link);
  }
  // A handshake starts it over from the initial backoff.
  dial.Dialed("a:1", link, t);
  EXPECT_EQ(dial.MemberAt("a:1"), "");
  EXPECT_EQ(dial.Handshaken(link, "a"), "a:1");
  EXPECT_EQ(dial.MemberAt("a:1"), "a") << "the member its handshake came from";
  t += milliseconds(1000);
  ASSERT_EQ(dial.Due(t, never).size(), 1u);
  EXPECT_EQ(dial.Due(t + milliseconds(126), never).size(), 1u) << "initial backoff again";
  // Connected addresses are not dialed.
  EXPECT_TRUE(
      dial.Due(t + std::chrono::seconds(10), [](const std::string&) { return true; }).empty());
}

// Each dial is a gRPC channel and a connection: a member list of 1,000
// made-up names had a node dial them all at once (about 200 MiB of RSS and
// a /status slower than 2 s, reckon-attacker). At most max_in_flight dials
// are out at once; the others wait their turn, every address in turn
// (round robin from where the last hand-out stopped), and are counted.
TEST(DialSchedule, AtMostMaxInFlightDialsAndEveryAddressGetsItsTurn) {
  DialSchedule::Options o{milliseconds(100), milliseconds(800), std::chrono::seconds(6)};
  o.max_in_flight = 3;
  DialSchedule dial(o, 1);
  const Clock::time_point t0{};
  auto never = [](const std::string&) { return false; };
  for (int i = 0; i < 10; ++i) dial.Learn(absl::StrCat("p", i, ":1"), t0);
  std::set<std::string> dialed;
  std::vector<std::shared_ptr<Link>> links;
  Clock::time_point t = t0;
  for (int round = 0; round < 4; ++round) {
    const std::vector<std::string> due = dial.Due(t, never);
    EXPECT_EQ(due.size(), 3u) << round;
    for (const std::string& address : due) {
      dialed.insert(address);
      links.push_back(std::make_shared<NullLink>());
      dial.Dialed(address, links.back(), t);
    }
    EXPECT_TRUE(dial.Due(t, never).empty()) << "three in flight";
    for (const auto& link : links) dial.Closed(link);
    links.clear();
    t += milliseconds(200);  // every backoff has passed: the turn decides
  }
  EXPECT_EQ(dialed.size(), 10u) << "every address had its turn";
  EXPECT_GE(dial.deferred(), 7u);
}

TEST(DialSchedule, EveryDialHasADeadlineAndSelfDialsAreRemembered) {
  DialSchedule dial({milliseconds(100), milliseconds(800), std::chrono::seconds(6)}, 1);
  const Clock::time_point t0{};
  auto never = [](const std::string&) { return false; };
  dial.Learn("a:1", t0);
  dial.Learn("b:1", t0);
  ASSERT_EQ(dial.Due(t0, never).size(), 2u);
  auto a = std::make_shared<NullLink>(), b = std::make_shared<NullLink>();
  dial.Dialed("a:1", a, t0);
  dial.Dialed("b:1", b, t0);
  EXPECT_EQ(dial.Pending().size(), 2u);
  EXPECT_TRUE(dial.TakeExpired(t0 + std::chrono::seconds(6)).empty());
  dial.DialedSelf(b);  // b:1 answered with our own Hello: it is us
  EXPECT_TRUE(dial.IsSelf("b:1"));
  std::vector<DialSchedule::Expired> expired = dial.TakeExpired(t0 + std::chrono::seconds(7));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired[0].address, "a:1");
  EXPECT_EQ(expired[0].link, a);
  EXPECT_TRUE(dial.Pending().empty());
  EXPECT_EQ(dial.Due(t0 + std::chrono::seconds(8), never), std::vector<std::string>{"a:1"});
}

}  // namespace
}  // namespace reckon::server
