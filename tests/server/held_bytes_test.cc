// HeldBytes: the gossip node's part, tested without sockets (server/held_bytes.h).
#include "server/held_bytes.h"

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

// Frames off the Update fast path (server/held_bytes.cc): an Update that
// carries unknown fields (a peer can append any), and heartbeats with a
// version vector of many origins, counted by reflection.
TEST(HeldBytes, FramesWithUnknownFieldsAndHeartbeatsAreCountedAsAllocated) {
#ifdef RECKON_UNDER_ASAN
  GTEST_SKIP() << "under AddressSanitizer: its allocator is not the one mallinfo2 reports";
#endif
  std::mt19937_64 rng(6);
  auto parse = [](const v1::GossipFrame& wire) {
    auto frame = std::make_shared<v1::GossipFrame>();
    EXPECT_TRUE(frame->ParseFromString(wire.SerializeAsString()));
    return frame;
  };
  std::vector<std::shared_ptr<v1::GossipFrame>> held;
  size_t counted = 0;
  const size_t before = HeapInUse();
  for (int i = 0; i < 4000; ++i) {
    v1::GossipFrame wire;
    *wire.mutable_update() = ArrivalReceived(InventedId(i, 20), 2, 10, rng).frame->update();
    // Field 99, a length-delimited unknown one of 100 bytes.
    v1::Update with_unknown = wire.update();
    std::string unknown = std::string("\x9a\x06", 2) + char(100) + std::string(100, 'u');
    ASSERT_TRUE(with_unknown.MergeFromString(unknown));
    *wire.mutable_update() = with_unknown;
    held.push_back(parse(wire));
    counted += HeldBytesOf(*held.back());
  }
  for (int i = 0; i < 400; ++i) {
    v1::GossipFrame wire;
    for (int k = 0; k < 20; ++k) {
      v1::VersionEntry* e = wire.mutable_heartbeat()->mutable_applied()->add_entries();
      e->mutable_origin()->set_node_id(InventedId(k, 24));
      e->mutable_origin()->set_incarnation(3);
      e->set_seq(k + 1);
    }
    wire.mutable_heartbeat()->set_weight_hash(std::string(64, 'h'));
    held.push_back(parse(wire));
    counted += HeldBytesOf(*held.back());
  }
  const double real = double(HeapInUse() - before) - double(held.capacity() * sizeof(held[0]));
  std::printf("FIGURES held frames off the fast path: %.0f bytes allocated, %.0f counted (%.3fx)\n",
              real, double(counted), real / double(counted));
  EXPECT_LE(real, 1.25 * double(counted));
  EXPECT_GE(real, 0.8 * double(counted));
}

}  // namespace
}  // namespace reckon::server
