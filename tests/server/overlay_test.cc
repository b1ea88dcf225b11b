// Overlay: the gossip node's part, tested without sockets (server/overlay.h).
#include "server/overlay.h"

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

// Every ring size up to 70: from the origin, the tree reaches every other
// position exactly once, within ceil(log2 N) hops, and nobody sends one
// message more than ceil(log2 N) times; each position's parent is the one
// that sends to it.
TEST(Overlay, TheBinomialTreeReachesEveryMemberOnceInLog2NHops) {
  for (size_t n = 1; n <= 70; ++n) {
    const size_t log2n = n == 1 ? 0 : static_cast<size_t>(std::ceil(std::log2(n)));
    std::vector<int> reached(n, 0);
    std::vector<size_t> depth(n, 0);
    std::vector<size_t> frontier = {0};
    reached[0] = 1;
    while (!frontier.empty()) {
      std::vector<size_t> next;
      for (size_t r : frontier) {
        const std::vector<size_t> children = TreeChildren(r, n);
        EXPECT_LE(children.size(), log2n) << "n " << n << " relative " << r;
        for (size_t c : children) {
          ASSERT_LT(c, n);
          ++reached[c];
          depth[c] = depth[r] + 1;
          EXPECT_EQ(TreeParent(c), r) << "n " << n << " child " << c;
          next.push_back(c);
        }
      }
      frontier = std::move(next);
    }
    for (size_t r = 0; r < n; ++r) {
      EXPECT_EQ(reached[r], 1) << "n " << n << " relative " << r;
      EXPECT_LE(depth[r], log2n) << "n " << n << " relative " << r;
    }
  }
  EXPECT_EQ(TreeChildren(0, 8), (std::vector<size_t>{1, 2, 4}));
  EXPECT_EQ(TreeChildren(4, 8), (std::vector<size_t>{5, 6}));
  EXPECT_EQ(TreeChildren(4, 6), (std::vector<size_t>{5}));
  EXPECT_TRUE(TreeChildren(3, 8).empty());
}

// On a ring of node ids, whoever the origin: the sends of every member
// reach each other member once, and each tree edge joins ring neighbours
// (2^i apart), at most 2 ceil(log2 N) of them per member.
TEST(Overlay, TheRingRotatesTheTreeToEveryOriginOverTheSameNeighbours) {
  std::vector<std::string> ids;
  for (int i = 0; i < 13; ++i) ids.push_back("w" + std::to_string(100 + (i * 7) % 13));
  const Ring ring(ids);
  ASSERT_EQ(ring.size(), 13u);
  EXPECT_EQ(ring.Position("w100"), 0u);  // sorted by node id
  EXPECT_EQ(ring.Position("w112"), 12u);
  EXPECT_FALSE(ring.Position("w99").has_value());
  std::map<std::string, std::set<std::string>> neighbours;
  for (const std::string& origin : ids) {
    std::map<std::string, int> received;
    for (const std::string& sender : ids) {
      for (const std::string& child : ring.Children(origin, sender)) {
        ++received[child];
        EXPECT_TRUE(ring.IsChild(origin, sender, child));
        EXPECT_TRUE(ring.Neighbours(sender, child)) << sender << " " << child;
        neighbours[sender].insert(child);
        neighbours[child].insert(sender);
      }
    }
    EXPECT_EQ(received.size(), ids.size() - 1) << origin;
    EXPECT_EQ(received.count(origin), 0u) << origin;
    for (const auto& [id, times] : received) EXPECT_EQ(times, 1) << origin << " -> " << id;
  }
  for (const auto& [id, set] : neighbours) EXPECT_LE(set.size(), 8u) << id;  // 2 ceil(log2 13)
  EXPECT_TRUE(ring.Children("w99", "w100").empty());  // an origin not on the ring: no tree
  EXPECT_FALSE(ring.IsChild("w100", "w100", "w99"));
  EXPECT_FALSE(ring.Neighbours("w100", "w100"));
}

}  // namespace
}  // namespace reckon::server
