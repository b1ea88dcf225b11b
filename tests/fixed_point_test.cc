#include "codec/fixed_point.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <thread>

#include "codec/update_words.h"
#include "tests/test_util.h"

namespace reckon::codec {
namespace {

using ::reckon::testing::RandomUpdates;

TEST(SplitMix64, MatchesThePublishedReferenceStream) {
  // First outputs of Vigna's splitmix64.c seeded with 0.
  SplitMix64 rng(0);
  EXPECT_EQ(rng.Next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng.Next(), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng.Next(), 0x06C45D188009454Full);
}

TEST(SplitMix64, UniformStaysInRangeAndCoversIt) {
  SplitMix64 rng(7);
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 7000; ++i) {
    const uint64_t x = rng.Uniform(6);
    ASSERT_LE(x, 6u);
    ++seen[x];
  }
  for (const int c : seen) EXPECT_GT(c, 800);  // each of 7 values near 1000
  EXPECT_EQ(rng.Uniform(0), 0u);
}

TEST(FixedPointReplica, CreateRejectsBadShapes) {
  EXPECT_FALSE(FixedPointReplica::Create((uint64_t{1} << 31) + 1, 32).ok());
  EXPECT_FALSE(FixedPointReplica::Create(10, 63).ok());
  EXPECT_FALSE(FixedPointReplica::Create(10, -1).ok());
  EXPECT_TRUE(FixedPointReplica::Create(0, 32).ok());
}

TEST(FixedPointReplica, InitializationIsDeterministicOnGridAndWithinLimit) {
  absl::StatusOr<FixedPointReplica> a = FixedPointReplica::Create(10'000, 32);
  absl::StatusOr<FixedPointReplica> b = FixedPointReplica::Create(10'000, 32);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(a->InitializeUniform(42, 0, 0, 5000, 0.05).ok());
  ASSERT_TRUE(a->InitializeUniform(42, 1, 5000, 5000, 0.5).ok());
  ASSERT_TRUE(b->InitializeUniform(42, 0, 0, 5000, 0.05).ok());
  ASSERT_TRUE(b->InitializeUniform(42, 1, 5000, 5000, 0.5).ok());
  EXPECT_TRUE(std::equal(a->quanta().begin(), a->quanta().end(), b->quanta().begin()));
  double max0 = 0, max1 = 0;
  for (size_t i = 0; i < 10'000; ++i) {
    const float w = a->weights()[i];
    EXPECT_EQ(w, QuantaToFloat(a->quanta()[i], a->quantum()));
    (i < 5000 ? max0 : max1) = std::max(i < 5000 ? max0 : max1, std::fabs(double(w)));
  }
  EXPECT_LE(max0, 0.05);
  EXPECT_GT(max0, 0.049);  // the range is used
  EXPECT_LE(max1, 0.5);
  // Another seed or stream gives other weights.
  ASSERT_TRUE(b->InitializeUniform(43, 0, 0, 5000, 0.05).ok());
  EXPECT_FALSE(std::equal(a->quanta().begin(), a->quanta().begin() + 5000, b->quanta().begin()));
  EXPECT_FALSE(a->InitializeUniform(1, 0, 9000, 2000, 0.1).ok());  // past the end
  EXPECT_FALSE(a->InitializeUniform(1, 0, 0, 10, std::nan("")).ok());
}

TEST(FixedPointReplica, ApplyAddsStepsAndRefreshesTouchedWeights) {
  absl::StatusOr<FixedPointReplica> r = FixedPointReplica::Create(8, 4);  // quantum 1/16
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->Apply(3, std::vector<uint32_t>{PackUpdate(1, false), PackUpdate(6, true)}).ok());
  EXPECT_EQ(r->quanta()[1], 3);
  EXPECT_EQ(r->quanta()[6], -3);
  EXPECT_EQ(r->weights()[1], 3.0f / 16);
  EXPECT_EQ(r->weights()[6], -3.0f / 16);
  EXPECT_EQ(r->quanta()[0], 0);
}

// A gossip node's mirror keeps no float copy, and messages are applied with
// prefetching or without (a worker's node keeps none): the quanta, the
// hash and the wrap count are the same every way; only the float copy's
// presence differs. Messages long enough that the prefetch runs ahead.
TEST(FixedPointReplica, WithoutTheFloatCopyOrThePrefetchTheQuantaAreTheSame) {
  constexpr uint64_t kN = 5000;
  std::vector<FixedPointReplica> replicas;
  for (auto floats : {FixedPointReplica::FloatCopy::kKept, FixedPointReplica::FloatCopy::kNone}) {
    for (int copies = 0; copies < 2; ++copies) {
      replicas.push_back(*FixedPointReplica::Create(kN, 32, floats));
      ASSERT_TRUE(replicas.back().InitializeUniform(3, 0, 0, kN, 0.1).ok());
    }
  }
  for (int m = 0; m < 20; ++m) {
    const std::vector<uint32_t> words = RandomUpdates(400, kN, 100 + m);
    const int64_t step = int64_t{1} << (20 + m % 30);  // some additions wrap
    for (size_t r = 0; r < replicas.size(); ++r) {
      const auto prefetch =
          r % 2 == 0 ? FixedPointReplica::Prefetch::kOn : FixedPointReplica::Prefetch::kOff;
      ASSERT_TRUE(replicas[r].Apply(step, words, prefetch).ok());
    }
  }
  for (const FixedPointReplica& r : replicas) {
    EXPECT_TRUE(std::equal(r.quanta().begin(), r.quanta().end(), replicas[0].quanta().begin()));
    EXPECT_EQ(r.WeightHash(), replicas[0].WeightHash());
    EXPECT_EQ(r.wrapped(), replicas[0].wrapped());
  }
  EXPECT_TRUE(replicas[0].keeps_floats());
  EXPECT_EQ(replicas[0].weights().size(), kN);
  for (uint64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(replicas[0].weights()[i], QuantaToFloat(replicas[0].quanta()[i], 0x1p-32)) << i;
  }
  EXPECT_FALSE(replicas[2].keeps_floats());
  EXPECT_TRUE(replicas[2].weights().empty());
  // Load and dense updates need no float copy either.
  std::vector<int64_t> ones(kN, 1);
  ASSERT_TRUE(replicas[2].ApplyDense(ones).ok());
  ASSERT_TRUE(replicas[0].ApplyDense(ones).ok());
  EXPECT_EQ(replicas[2].WeightHash(), replicas[0].WeightHash());
  ASSERT_TRUE(replicas[2].Load(replicas[1].quanta()).ok());
  EXPECT_EQ(replicas[2].WeightHash(), replicas[1].WeightHash());
}

// A large message applied in stripes on several threads (the gossip node's
// receive path): each thread its own run of the message's words, so its own
// parameters, since the words are strictly ascending. The same quanta, float
// copy and wrapped count as one thread, whichever stripe runs first; a bad
// word anywhere refuses the message before any stripe starts.
TEST(FixedPointReplica, StripesOnThreadsApplyWhatOneThreadDoes) {
  constexpr uint64_t kN = 200000;
  auto threads = [](size_t n, const std::function<void(size_t, size_t)>& fn) {
    std::vector<std::thread> stripes;
    for (size_t k = 0; k < 4; ++k) stripes.emplace_back(fn, n * k / 4, n * (k + 1) / 4);
    for (std::thread& t : stripes) t.join();
  };
  auto backwards = [](size_t n, const std::function<void(size_t, size_t)>& fn) {
    for (size_t k = 3; k-- > 0;) fn(n * k / 3, n * (k + 1) / 3);
  };
  std::vector<FixedPointReplica> replicas;
  for (int r = 0; r < 3; ++r) {
    replicas.push_back(*FixedPointReplica::Create(kN, 32));
    ASSERT_TRUE(replicas.back().InitializeUniform(5, 0, 0, kN, 0.1).ok());
  }
  for (int m = 0; m < 12; ++m) {
    const std::vector<uint32_t> words = RandomUpdates(20000 + 997 * m, kN, 300 + m);
    const int64_t step = int64_t{1} << (m % 2 == 0 ? 61 : 20);  // some additions wrap
    ASSERT_TRUE(replicas[0].Apply(step, words).ok());
    ASSERT_TRUE(replicas[1].Apply(step, words, FixedPointReplica::Prefetch::kOn, threads).ok());
    ASSERT_TRUE(replicas[2].Apply(step, words, FixedPointReplica::Prefetch::kOn, backwards).ok());
  }
  ASSERT_GT(replicas[0].wrapped(), 0u);
  for (const FixedPointReplica& r : replicas) {
    EXPECT_TRUE(std::equal(r.quanta().begin(), r.quanta().end(), replicas[0].quanta().begin()));
    EXPECT_TRUE(std::equal(r.weights().begin(), r.weights().end(), replicas[0].weights().begin()));
    EXPECT_EQ(r.wrapped(), replicas[0].wrapped());
  }
  std::vector<uint32_t> bad = RandomUpdates(30000, kN, 999);
  bad.back() = PackUpdate(kN, false);
  bool striped = false;
  auto watch = [&](size_t n, const std::function<void(size_t, size_t)>& fn) {
    striped = true;
    fn(0, n);
  };
  const std::string hash = replicas[1].WeightHash();
  EXPECT_FALSE(replicas[1].Apply(1, bad, FixedPointReplica::Prefetch::kOn, watch).ok());
  EXPECT_FALSE(striped);
  EXPECT_EQ(replicas[1].WeightHash(), hash);
}

TEST(FixedPointReplica, ApplyIsAllOrNothing) {
  absl::StatusOr<FixedPointReplica> r = FixedPointReplica::Create(100, 32);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->InitializeUniform(1, 0, 0, 100, 0.1).ok());
  const std::vector<int64_t> before(r->quanta().begin(), r->quanta().end());
  auto unchanged = [&] { return std::equal(before.begin(), before.end(), r->quanta().begin()); };
  // A bad word at the end: the good ones before it must not be applied.
  EXPECT_FALSE(
      r->Apply(5, std::vector<uint32_t>{PackUpdate(1, false), PackUpdate(100, false)}).ok());
  EXPECT_TRUE(unchanged());
  EXPECT_FALSE(r->Apply(5, std::vector<uint32_t>{PackUpdate(3, false), PackUpdate(2, false)}).ok());
  EXPECT_TRUE(unchanged());
  EXPECT_FALSE(r->Apply(5, std::vector<uint32_t>{PackUpdate(3, false), PackUpdate(3, true)}).ok());
  EXPECT_TRUE(unchanged());
  EXPECT_FALSE(r->Apply(0, std::vector<uint32_t>{PackUpdate(3, false)}).ok());
  EXPECT_TRUE(unchanged());
}

// A sum past the int64 range wraps, modulo 2^64 (docs/wire.md §3), and is
// counted: the same messages in either order give the same quanta, though
// one order passes the range on the way and the other does not.
TEST(FixedPointReplica, SumsPastTheInt64RangeWrapTheSameInAnyOrder) {
  constexpr int64_t kBig = std::numeric_limits<int64_t>::max() / 2 + 1;  // 2^62
  const std::vector<uint32_t> up = {PackUpdate(0, false)}, down = {PackUpdate(0, true)};
  absl::StatusOr<FixedPointReplica> a = FixedPointReplica::Create(2, 0);
  absl::StatusOr<FixedPointReplica> b = FixedPointReplica::Create(2, 0);
  ASSERT_TRUE(a.ok() && b.ok());
  // a: up, up (2^63: past the range, wraps to -2^63), down (wraps back to
  // 2^62), up (wraps again): three wraps.
  for (const auto* words : {&up, &up, &down, &up}) ASSERT_TRUE(a->Apply(kBig, *words).ok());
  // b: down first, never leaving the range on the way.
  for (const auto* words : {&down, &up, &up, &up}) ASSERT_TRUE(b->Apply(kBig, *words).ok());
  EXPECT_EQ(a->quanta()[0], b->quanta()[0]);
  EXPECT_EQ(a->quanta()[0], std::numeric_limits<int64_t>::min());  // 2 * 2^62 mod 2^64
  EXPECT_EQ(a->WeightHash(), b->WeightHash());
  EXPECT_EQ(a->wrapped(), 3u);
  EXPECT_EQ(b->wrapped(), 1u);  // its last up: 2^62 + 2^62
  EXPECT_EQ(a->quanta()[1], 0);
  // Dense: the same rule, every parameter.
  const std::vector<int64_t> delta = {std::numeric_limits<int64_t>::max(), 5};
  ASSERT_TRUE(a->ApplyDense(delta).ok());
  EXPECT_EQ(a->quanta()[0], -1);  // INT64_MIN + INT64_MAX
  EXPECT_EQ(a->quanta()[1], 5);
  EXPECT_EQ(a->wrapped(), 3u);  // no wrap: the sum is in range
  ASSERT_TRUE(a->ApplyDense(std::vector<int64_t>{2, 0}).ok());
  ASSERT_TRUE(a->ApplyDense(std::vector<int64_t>{std::numeric_limits<int64_t>::max(), 0}).ok());
  EXPECT_EQ(a->quanta()[0], std::numeric_limits<int64_t>::min());  // 1 + INT64_MAX wraps
  EXPECT_EQ(a->wrapped(), 4u);
  // The sum runs over two arrays that may not overlap: the replica's own
  // quanta as the update are refused, and nothing moves.
  const std::vector<int64_t> before(a->quanta().begin(), a->quanta().end());
  EXPECT_EQ(a->ApplyDense(a->quanta()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), a->quanta().begin()));
}

// Both dense applies take one value a parameter from memory that is not
// the replica's own, and refuse anything else by name with nothing moved:
// the int64 delta, and the fp32 payload checked in the same walk.
TEST(FixedPointReplica, ADenseUpdateOfAnotherSizeOrInTheReplicasOwnQuantaIsRefused) {
  constexpr size_t kN = 100;
  absl::StatusOr<FixedPointReplica> r = FixedPointReplica::Create(kN, 32);
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(r->ApplyDense(std::vector<int64_t>(kN, 3)).ok());
  const std::vector<int64_t> before(r->quanta().begin(), r->quanta().end());
  const auto unchanged = [&] {
    return std::equal(before.begin(), before.end(), r->quanta().begin());
  };

  absl::Status s = r->ApplyDense(std::vector<int64_t>(kN + 1, 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("808 bytes (8 a value), replica needs 800"));
  const std::string fp32(4 * (kN - 1), '\0');  // zeros: a valid value each
  s = r->ApplyCheckedDenseFp32(fp32, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("396 bytes (4 a value), replica needs 400"));
  EXPECT_TRUE(unchanged());

  // The replica's own quanta as an fp32 payload: the first 400 of its bytes.
  const std::string_view own(reinterpret_cast<const char*>(r->quanta().data()), 4 * kN);
  s = r->ApplyCheckedDenseFp32(own, 0);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("own quanta"));
  s = r->ApplyDense(r->quanta());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), ::testing::HasSubstr("own quanta"));
  EXPECT_TRUE(unchanged());
  EXPECT_EQ(r->wrapped(), 0u);
}

// The heart of dead reckoning: the same messages in any order give
// memcmp-identical replicas, while the float32 `+=` control drifts.
TEST(FixedPointReplica, OneThousandOrdersGiveIdenticalReplicasAndFloatControlDrifts) {
  constexpr uint64_t kParams = 4096;
  constexpr int kMessages = 64;
  struct Message {
    int64_t step_quanta;
    float tau;
    std::vector<uint32_t> words;
  };
  std::vector<Message> messages;
  std::mt19937_64 rng(2015);
  for (int m = 0; m < kMessages; ++m) {
    // Several thresholds, as after tau changes, so float sums round differently.
    absl::StatusOr<ThresholdStep> step = MakeThresholdStep(0.001 * (1 + m % 7) / 3.0, 32);
    ASSERT_TRUE(step.ok());
    messages.push_back({step->step_quanta, step->tau, RandomUpdates(1024, kParams, rng())});
  }
  absl::StatusOr<FixedPointReplica> base = FixedPointReplica::Create(kParams, 32);
  ASSERT_TRUE(base.ok());
  ASSERT_TRUE(base->InitializeUniform(7, 0, 0, kParams, 0.1).ok());

  std::vector<int64_t> first_quanta;
  std::vector<float> first_weights, first_control;
  int control_differs = 0;
  std::vector<int> order(kMessages);
  for (int i = 0; i < kMessages; ++i) order[i] = i;
  for (int trial = 0; trial < 1000; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    FixedPointReplica replica = *base;
    std::vector<float> control(base->weights().begin(), base->weights().end());
    for (const int m : order) {
      ASSERT_TRUE(replica.Apply(messages[m].step_quanta, messages[m].words).ok());
      for (const uint32_t w : messages[m].words) {
        control[UpdateIndex(w)] += UpdateIsNegative(w) ? -messages[m].tau : messages[m].tau;
      }
    }
    if (trial == 0) {
      first_quanta.assign(replica.quanta().begin(), replica.quanta().end());
      first_weights.assign(replica.weights().begin(), replica.weights().end());
      first_control = control;
      continue;
    }
    ASSERT_EQ(std::memcmp(first_quanta.data(), replica.quanta().data(), kParams * 8), 0)
        << "fixed-point replica differs in order " << trial;
    ASSERT_EQ(std::memcmp(first_weights.data(), replica.weights().data(), kParams * 4), 0)
        << "float32 copy differs in order " << trial;
    if (std::memcmp(first_control.data(), control.data(), kParams * 4) != 0) ++control_differs;
  }
  // The control proves the test can see order-dependent drift.
  EXPECT_GT(control_differs, 900) << "float32 += should differ in nearly every order";
}

}  // namespace
}  // namespace reckon::codec
