// AppliedState: the gossip node's part, tested without sockets (server/applied_state.h).
#include "server/applied_state.h"

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

// The mirror, the version vector and the checksum ledger move together: a
// message is applied to all three or to none, only as the next of its
// origin; a snapshot replaces all three, the log beyond its cut replayed,
// or changes nothing.
TEST(AppliedState, AppliesOnlyTheNextMessageAndInstallsAllOrNothing) {
  namespace t = ::reckon::server::testing;
  const codec::WeightChecksum checksum(t::Fingerprint().seed());
  auto fresh = [&] {
    codec::FixedPointReplica mirror =
        *codec::FixedPointReplica::Create(t::kParams, t::kFractionBits);
    EXPECT_TRUE(mirror.Load(t::InitialWeights()).ok());
    return AppliedState(std::move(mirror), checksum);
  };
  auto weights = [](const AppliedState& r) { return r.mirror()->CopyWeights(); };
  const NodeOptions a = t::Options(0, 1);
  const OriginKey origin{a.node_id, a.incarnation};
  std::mt19937_64 rng(3);
  std::vector<t::Message> m;
  for (uint64_t seq = 1; seq <= 3; ++seq) m.push_back(t::MakeMessage(a, seq, rng));
  auto apply = [&](AppliedState& r, uint64_t seq) {
    return r.Apply(origin, seq, m[seq - 1].update.checksum_delta(),
                   std::make_shared<const codec::DecodedUpdate>(m[seq - 1].decoded));
  };

  AppliedState r = fresh();
  const uint64_t initial = r.checksum();
  EXPECT_EQ(initial, checksum.Of(t::InitialWeights()));
  // Not the next: refused, nothing moved.
  EXPECT_EQ(apply(r, 2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(r.applied().empty());
  EXPECT_EQ(r.checksum(), initial);
  EXPECT_EQ(weights(r), t::InitialWeights());
  // The next: all three move, and the weights measure what the ledger says.
  ASSERT_TRUE(apply(r, 1).ok());
  EXPECT_EQ(SeqOf(r.applied(), origin), 1u);
  EXPECT_NE(weights(r), t::InitialWeights());
  EXPECT_EQ(checksum.Of(weights(r)), r.checksum());
  const std::vector<int64_t> at_one = weights(r);
  const uint64_t sum_at_one = r.checksum();
  // Again: a duplicate, refused.
  EXPECT_FALSE(apply(r, 1).ok());
  EXPECT_EQ(weights(r), at_one);
  ASSERT_TRUE(apply(r, 2).ok());
  ASSERT_TRUE(apply(r, 3).ok());
  EXPECT_EQ(checksum.Of(weights(r)), r.checksum());

  // A snapshot at seq 1, with seqs 2 and 3 in the log: it ends where r is.
  MessageLog log(size_t{1} << 20, std::chrono::seconds(1));
  for (uint64_t seq = 2; seq <= 3; ++seq) {
    auto frame = std::make_shared<v1::GossipFrame>();
    *frame->mutable_update() = m[seq - 1].update;
    log.Add(origin, frame, Clock::now());
  }
  const VersionMap cut = {{origin, 1}};
  AppliedState joined = fresh();
  ASSERT_TRUE(joined.Install(at_one, cut, sum_at_one, log).ok());
  EXPECT_EQ(joined.applied(), r.applied());
  EXPECT_EQ(weights(joined), weights(r));
  EXPECT_EQ(joined.checksum(), r.checksum());

  // A logged message that does not replay, or weights of another size:
  // nothing changed.
  MessageLog corrupt(size_t{1} << 20, std::chrono::seconds(1));
  auto bad = std::make_shared<v1::GossipFrame>();
  *bad->mutable_update() = m[1].update;
  bad->mutable_update()->set_crc32c(bad->update().crc32c() ^ 1);
  corrupt.Add(origin, bad, Clock::now());
  AppliedState untouched = fresh();
  EXPECT_EQ(untouched.Install(at_one, cut, sum_at_one, corrupt).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_FALSE(untouched.Install(std::vector<int64_t>(10), cut, sum_at_one, log).ok());
  EXPECT_TRUE(untouched.applied().empty());
  EXPECT_EQ(weights(untouched), t::InitialWeights());
  EXPECT_EQ(untouched.checksum(), initial);
}

// Without a mirror (a worker's node: the training replica is the only one)
// the vector and the ledger move as with one, and a snapshot's replay hands
// back the replayed messages: the snapshot's weights plus those, applied in
// that order, are the replica a mirror would have installed.
TEST(AppliedState, WithoutAMirrorTheReplayIsHandedToTheTrainingReplica) {
  namespace t = ::reckon::server::testing;
  const codec::WeightChecksum checksum(t::Fingerprint().seed());
  codec::FixedPointReplica kept = *codec::FixedPointReplica::Create(t::kParams, t::kFractionBits);
  ASSERT_TRUE(kept.Load(t::InitialWeights()).ok());
  AppliedState with(std::move(kept), checksum);
  AppliedState without(t::kParams, checksum.Of(t::InitialWeights()));
  EXPECT_FALSE(without.has_mirror());
  EXPECT_EQ(without.checksum(), with.checksum());
  const NodeOptions a = t::Options(0, 1);
  const OriginKey origin{a.node_id, a.incarnation};
  std::mt19937_64 rng(4);
  std::vector<t::Message> m;
  for (uint64_t seq = 1; seq <= 3; ++seq) m.push_back(t::MakeMessage(a, seq, rng));
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    auto decoded = std::make_shared<const codec::DecodedUpdate>(m[seq - 1].decoded);
    ASSERT_TRUE(with.Apply(origin, seq, m[seq - 1].update.checksum_delta(), decoded).ok());
    ASSERT_TRUE(without.Apply(origin, seq, m[seq - 1].update.checksum_delta(), nullptr).ok());
  }
  EXPECT_EQ(without.applied(), with.applied());
  EXPECT_EQ(without.checksum(), with.checksum());
  EXPECT_EQ(without.Apply(origin, 5, 0, nullptr).code(), absl::StatusCode::kFailedPrecondition);

  // The snapshot at seq 1 (as the mirror had it), seqs 2 and 3 in the log.
  codec::FixedPointReplica at_one = *codec::FixedPointReplica::Create(t::kParams, t::kFractionBits);
  ASSERT_TRUE(at_one.Load(t::InitialWeights()).ok());
  ASSERT_TRUE(codec::ApplyDecoded(m[0].decoded, &at_one).ok());
  const std::vector<int64_t> snapshot(at_one.quanta().begin(), at_one.quanta().end());
  MessageLog log(size_t{1} << 20, std::chrono::seconds(1));
  for (uint64_t seq = 2; seq <= 3; ++seq) {
    auto frame = std::make_shared<v1::GossipFrame>();
    *frame->mutable_update() = m[seq - 1].update;
    log.Add(origin, frame, Clock::now());
  }
  const VersionMap cut = {{origin, 1}};
  AppliedState joined(t::kParams, checksum.Of(t::InitialWeights()));
  // Without a mirror the replay must go somewhere.
  EXPECT_FALSE(joined.Install(snapshot, cut, checksum.Of(snapshot), log).ok());
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> replayed;
  ASSERT_TRUE(joined.Install(snapshot, cut, checksum.Of(snapshot), log, &replayed).ok());
  EXPECT_EQ(joined.applied(), with.applied());
  EXPECT_EQ(joined.checksum(), with.checksum());
  ASSERT_EQ(replayed.size(), 2u);
  for (const auto& decoded : replayed) ASSERT_TRUE(codec::ApplyDecoded(*decoded, &at_one).ok());
  EXPECT_EQ(std::vector<int64_t>(at_one.quanta().begin(), at_one.quanta().end()),
            with.mirror()->CopyWeights());

  // Weights of another size: refused, nothing changed.
  replayed.clear();
  AppliedState untouched(t::kParams, checksum.Of(t::InitialWeights()));
  EXPECT_EQ(untouched.Install(std::vector<int64_t>(10), cut, 0, log, &replayed).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(untouched.applied().empty());
  EXPECT_TRUE(replayed.empty());
}

}  // namespace
}  // namespace reckon::server
