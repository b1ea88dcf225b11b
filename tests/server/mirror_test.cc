// Mirror: the node's fixed-point replica with what is accepted but not added
// yet, tested without a node (server/mirror.h).
#include "server/mirror.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "tests/inproc_cluster.h"

namespace reckon::server {
namespace {

namespace t = ::reckon::server::testing;

codec::FixedPointReplica Fresh() {
  codec::FixedPointReplica r = *codec::FixedPointReplica::Create(t::kParams, t::kFractionBits);
  EXPECT_TRUE(r.Load(t::InitialWeights()).ok());
  return r;
}

std::vector<std::shared_ptr<const codec::DecodedUpdate>> Messages(int n, uint64_t seed) {
  const NodeOptions a = t::Options(0, 1);
  std::mt19937_64 rng(seed);
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> out;
  for (int seq = 1; seq <= n; ++seq) {
    out.push_back(
        std::make_shared<const codec::DecodedUpdate>(t::MakeMessage(a, seq, rng).decoded));
  }
  return out;
}

std::vector<int64_t> Applied(const std::vector<std::shared_ptr<const codec::DecodedUpdate>>& m) {
  codec::FixedPointReplica r = Fresh();
  for (const auto& d : m) EXPECT_TRUE(codec::ApplyDecoded(*d, &r).ok());
  return std::vector<int64_t>(r.quanta().begin(), r.quanta().end());
}

// Queued messages are added in order, by AddQueued or by whoever reads
// first: a read never sees fewer than were queued before it.
TEST(Mirror, AReadSeesEveryQueuedMessageWhoeverAddsIt) {
  const auto m = Messages(6, 1);
  const OriginKey origin{"a", 1};
  Mirror mirror(Fresh(), Mirror::Prefetch::kOn);
  for (int i = 0; i < 3; ++i) mirror.Queue(origin, i + 1, m[i]);
  // Not added yet by anyone: the read adds them.
  EXPECT_EQ(mirror.CopyWeights(), Applied({m.begin(), m.begin() + 3}));
  for (int i = 3; i < 6; ++i) mirror.Queue(origin, i + 1, m[i]);
  const Mirror::Report report = mirror.AddQueued();
  EXPECT_TRUE(report.wrapped.empty());
  EXPECT_TRUE(report.failed.empty());
  EXPECT_EQ(mirror.CopyWeights(), Applied(m));
}

// The node thread adds while other threads queue and read, as the training
// thread's Publish and the service's status do: every read is of a prefix
// of the queue, and the end is every message, bit for bit (run under the
// sanitizers by the README's test command).
TEST(Mirror, AddsOffTheQueuersLockWhileOthersRead) {
  const auto m = Messages(200, 2);
  const OriginKey origin{"a", 1};
  Mirror mirror(Fresh(), Mirror::Prefetch::kOn);
  std::atomic<bool> done{false};
  std::thread adder([&] {
    while (!done.load()) (void)mirror.AddQueued();
  });
  int reads_of_all = 0;
  for (size_t i = 0; i < m.size(); ++i) {
    mirror.Queue(origin, i + 1, m[i]);
    if (i % 50 == 49) {
      // Everything queued so far, no more, no less.
      EXPECT_EQ(mirror.CopyWeights(), Applied({m.begin(), m.begin() + i + 1})) << i;
      ++reads_of_all;
    }
  }
  done = true;
  adder.join();
  EXPECT_EQ(reads_of_all, 4);
  EXPECT_TRUE(mirror.AddQueued().failed.empty());
  EXPECT_EQ(mirror.CopyWeights(), Applied(m));
}

// What adding found is reported once, to the next AddQueued, whoever added:
// weights wrapped past the int64 range, and a message that could not be
// added (named; the others still are).
TEST(Mirror, ReportsWrapsAndFailuresToTheNextAddQueued) {
  codec::FixedPointReplica near_top = Fresh();
  std::vector<int64_t> top(t::kParams, 0);
  top[7] = INT64_MAX;
  ASSERT_TRUE(near_top.Load(top).ok());
  Mirror mirror(std::move(near_top), Mirror::Prefetch::kOn);
  auto up = std::make_shared<codec::DecodedUpdate>();
  up->codec = v1::CODEC_THRESHOLD_RICE;
  up->param_count = t::kParams;
  up->step_quanta = 5;
  up->words = {3, 7};  // sign 0: +5 each; 7 wraps
  auto beyond = std::make_shared<codec::DecodedUpdate>(*up);
  beyond->words = {uint32_t(t::kParams + 1)};  // not of this model
  mirror.Queue({"w", 1}, 4, up);
  (void)mirror.CopyWeights();  // a reader adds it
  mirror.Queue({"x", 2}, 9, beyond);
  mirror.Queue({"w", 1}, 5, up);
  const Mirror::Report report = mirror.AddQueued();
  ASSERT_EQ(report.wrapped.size(), 1u);  // the second add of `up` wraps no more
  EXPECT_EQ(report.wrapped[0].origin, (OriginKey{"w", 1}));
  EXPECT_EQ(report.wrapped[0].seq, 4u);
  EXPECT_EQ(report.wrapped[0].weights, 1u);
  ASSERT_EQ(report.failed.size(), 1u);
  EXPECT_NE(report.failed[0].message().find("seq 9"), std::string::npos) << report.failed[0];
  const std::vector<int64_t> weights = mirror.CopyWeights();
  EXPECT_EQ(weights[3], 10);
  EXPECT_EQ(weights[7], INT64_MIN + 4 + 5);
  EXPECT_TRUE(mirror.AddQueued().wrapped.empty());  // reported once
}

// Replace adds what was queued first, so that a replay that fails leaves
// the weights as every queued message made them.
TEST(Mirror, ReplaceIsAllOrNothingOverWhatWasQueued) {
  const auto m = Messages(3, 3);
  const OriginKey origin{"a", 1};
  Mirror mirror(Fresh(), Mirror::Prefetch::kOn);
  mirror.Queue(origin, 1, m[0]);
  auto bad = std::make_shared<codec::DecodedUpdate>(*m[1]);
  bad->words.push_back(uint32_t(t::kParams));  // beyond the model
  const std::vector<std::shared_ptr<const codec::DecodedUpdate>> replay = {m[1], bad};
  EXPECT_EQ(mirror.Replace(t::InitialWeights(), replay).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(mirror.CopyWeights(), Applied({m[0]}));
  EXPECT_FALSE(mirror.Replace(std::vector<int64_t>(10), {}).ok());
  EXPECT_EQ(mirror.CopyWeights(), Applied({m[0]}));
  // A good one: the weights, then the replay.
  ASSERT_TRUE(mirror.Replace(t::InitialWeights(), std::vector{m[1], m[2]}).ok());
  EXPECT_EQ(mirror.CopyWeights(), Applied({m[1], m[2]}));
}

}  // namespace
}  // namespace reckon::server
