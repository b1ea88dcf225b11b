// What several of the node's parts' tests share (tests/server/): links that
// go nowhere, a Hello, an Update as the node holds one, the allocator's
// bytes in use, and the shapes the byte caps are measured at.
#ifndef RECKON_TESTS_SERVER_PARTS_TEST_UTIL_H_
#define RECKON_TESTS_SERVER_PARTS_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <malloc.h>

#include <algorithm>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/early_arrivals.h"
#include "server/link.h"
#include "server/member.h"
#include "server/update_validation.h"
#include "tests/inproc_cluster.h"

namespace reckon::server {

inline const OriginKey kA{"a", 1}, kB{"b", 1};

// A member's state as a test of a part that reads members sets it; in the
// node only the member table changes it (MemberTable::MarkAlive, ...).
struct MemberTestAccess {
  static void SetState(Member& m, MemberState state) { m.state_ = state; }
};

// Bytes the allocator has given out and not taken back (all arenas), for
// checking what the caps count against what holding really costs.
inline size_t HeapInUse() {
  const struct mallinfo2 m = mallinfo2();
  return m.uordblks + m.hblkhd;
}

#if defined(__SANITIZE_ADDRESS__)
#define RECKON_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RECKON_UNDER_ASAN 1
#endif
#endif

// An Update of `node_id` (incarnation 1) at `seq` with `updates` updates,
// as the node holds one: parsed from the wire, moved into a shared frame,
// validated (which decodes it).
inline EarlyArrivals::Arrival ArrivalReceived(const std::string& node_id, uint64_t seq, int updates,
                                              std::mt19937_64& rng) {
  NodeOptions origin;
  origin.node_id = node_id;
  origin.incarnation = 1;
  v1::GossipFrame wire;
  *wire.mutable_update() = testing::MakeMessage(origin, seq, rng, updates).update;
  const std::string bytes = wire.SerializeAsString();
  v1::GossipFrame parsed;
  EXPECT_TRUE(parsed.ParseFromString(bytes));
  auto frame = std::make_shared<v1::GossipFrame>(std::move(parsed));
  ValidatedUpdate v = ValidateUpdate(frame->update(), testing::kParams,
                                     codec::WeightChecksum(testing::Fingerprint().seed()));
  EXPECT_TRUE(v.status.ok()) << v.status;
  return EarlyArrivals::Arrival{std::move(frame), std::move(v.decoded)};
}

struct HeldShape {
  const char* name;
  int updates;
  size_t id_length;
  int per_origin;
};
inline constexpr HeldShape kHeldShapes[] = {{"1 update, short ids", 1, 8, 1},
                                            {"20 updates, 60-byte ids", 20, 60, 1},
                                            {"400 updates, 3 a origin", 400, 30, 3}};

inline std::string InventedId(int i, size_t length) {
  std::string id = absl::StrCat("ghost", i);
  id.resize(std::max(id.size(), length), 'x');
  return id;
}

// A link that only exists: the schedule never sends on it.
class NullLink final : public Link {
 public:
  bool Send(std::shared_ptr<const v1::GossipFrame>, size_t) override { return true; }
  size_t QueuedBytes() const override { return 0; }
  void Close() override {}
  void Abort() override {}
  bool dialed() const override { return true; }
  std::string Describe() const override { return "null"; }
};

// A stream that goes nowhere: a member's link, for the rules that only ask
// whether it has one.
class NowhereLink final : public Link {
 public:
  bool Send(std::shared_ptr<const v1::GossipFrame>, size_t) override { return true; }
  size_t QueuedBytes() const override { return 0; }
  void Close() override {}
  void Abort() override {}
  bool dialed() const override { return false; }
  std::string Describe() const override { return "nowhere"; }
};

// A link that records what it was given and what was done to it; it
// refuses a frame while `queued` (what QueuedBytes says; sending does not
// change it) is at the byte cap.
class RecordingLink final : public Link {
 public:
  bool Send(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) override {
    if (queued >= byte_cap) return false;
    sent.push_back(std::move(frame));
    return true;
  }
  bool SendUrgent(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) override {
    if (queued >= byte_cap) return false;
    urgent.push_back(std::move(frame));
    return true;
  }
  size_t QueuedBytes() const override { return queued; }
  void Close() override { closed = true; }
  void Abort() override { aborted = true; }
  bool dialed() const override { return true; }
  std::string Describe() const override { return "recording"; }

  size_t queued = 0;  // what QueuedBytes says; sending does not change it
  bool closed = false, aborted = false;
  std::vector<std::shared_ptr<const v1::GossipFrame>> sent, urgent;
};

inline v1::Hello HelloFrom(const std::string& id, uint64_t incarnation,
                           const std::string& address = "h:1") {
  v1::Hello h;
  h.mutable_self()->set_node_id(id);
  h.mutable_self()->set_incarnation(incarnation);
  h.set_listen_address(address);
  return h;
}

}  // namespace reckon::server

#endif  // RECKON_TESTS_SERVER_PARTS_TEST_UTIL_H_
