#include "codec/weight_checksum.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <limits>
#include <vector>

#include "codec/fixed_point.h"
#include "tests/test_util.h"

namespace reckon::codec {
namespace {

using ::reckon::testing::RandomUpdates;

// The definition in weight_checksum.h, written the slow way: r_i is the i-th
// output of SplitMix64 seeded with the derived key.
uint64_t ReferenceChecksum(uint64_t seed, std::span<const int64_t> w) {
  SplitMix64 coefficients(SplitMix64(seed ^ 0x636865636b73756dull).Next());
  uint64_t sum = 0;
  for (const int64_t x : w) sum += coefficients.Next() * static_cast<uint64_t>(x);
  return sum;
}

FixedPointReplica SeededReplica(uint64_t params, uint64_t seed) {
  FixedPointReplica r = FixedPointReplica::Create(params, 32).value();
  EXPECT_TRUE(r.InitializeUniform(seed, 0, 0, params, 0.1).ok());
  return r;
}

// Every copy (any x86-64, AVX2, AVX-512 where this CPU has them: the
// others fall back, and say so) against the definition, at lengths that end
// inside and on a vector's lanes.
constexpr Isa kEveryChecksumCopy[] = {Isa::kPortable, Isa::kAvx2, Isa::kBest};

TEST(WeightChecksum, MatchesItsDefinition) {
  std::printf("FIGURES AVX2 on this CPU: %s, AVX-512: %s\n", Avx2Available() ? "yes" : "no",
              Avx512Available() ? "yes" : "no");
  for (const uint64_t params : {1001u, 1u, 7u, 8u, 9u, 64u}) {
    const FixedPointReplica r = SeededReplica(params, 5);
    for (const uint64_t seed : {0ull, 1ull, 0xDEADBEEFull}) {
      for (const Isa isa : kEveryChecksumCopy) {
        EXPECT_EQ(WeightChecksum(seed).Of(r.quanta(), isa), ReferenceChecksum(seed, r.quanta()))
            << params << " parameters, copy " << static_cast<int>(isa);
      }
    }
  }
  EXPECT_EQ(WeightChecksum(3).Of({}), 0u);
}

TEST(WeightChecksum, IsLinearSoEachMessageCarriesItsOwnContribution) {
  FixedPointReplica r = SeededReplica(5000, 9);
  const WeightChecksum checksum(42);
  uint64_t expected = checksum.Of(r.quanta());
  for (uint64_t m = 0; m < 20; ++m) {
    const std::vector<uint32_t> words = RandomUpdates(1 + 37 * m, 5000, 100 + m);
    const int64_t step = int64_t{1} << (20 + m % 12);
    ASSERT_TRUE(r.Apply(step, words).ok());
    expected += checksum.OfUpdate(step, words);
  }
  EXPECT_EQ(checksum.Of(r.quanta()), expected);
}

// An update's contribution, written the slow way: +-step times the
// coefficient of each index, mod 2^64, at steps that wrap and at both signs.
TEST(WeightChecksum, AnUpdatesContributionIsItsSignedStepsTimesTheirCoefficients) {
  const WeightChecksum checksum(11);
  for (const int64_t step :
       {int64_t{1}, int64_t{1} << 24, -(int64_t{1} << 40), std::numeric_limits<int64_t>::max(),
        std::numeric_limits<int64_t>::min()}) {
    for (uint64_t m = 0; m < 8; ++m) {
      const std::vector<uint32_t> words =
          RandomUpdates(1 + 997 * m, 1u << 20, 500 + m, /*all_negative=*/m == 3);
      uint64_t expected = 0;
      for (const uint32_t w : words) {
        const uint64_t signed_step =
            (w >> 31) != 0 ? 0 - static_cast<uint64_t>(step) : static_cast<uint64_t>(step);
        expected += checksum.Coefficient(w & 0x7FFFFFFFu) * signed_step;
      }
      for (const Isa isa : kEveryChecksumCopy) {
        EXPECT_EQ(checksum.OfUpdate(step, words, isa), expected)
            << "step " << step << ", message " << m << ", copy " << static_cast<int>(isa);
      }
    }
  }
  for (const Isa isa : kEveryChecksumCopy) EXPECT_EQ(checksum.OfUpdate(5, {}, isa), 0u);
}

TEST(WeightChecksum, SeesOneQuantumAnywhereAndDependsOnTheSeed) {
  FixedPointReplica r = SeededReplica(4096, 1);
  const WeightChecksum checksum(7);
  const uint64_t before = checksum.Of(r.quanta());
  std::vector<int64_t> w(r.quanta().begin(), r.quanta().end());
  for (size_t i = 0; i < w.size(); i += 97) {
    w[i] += 1;
    EXPECT_NE(checksum.Of(w), before) << "a one-quantum change at " << i << " went unseen";
    w[i] -= 1;
  }
  // Two weights swapped: a checksum that ignored positions would miss it.
  std::swap(w[10], w[11]);
  ASSERT_NE(w[10], w[11]);
  EXPECT_NE(checksum.Of(w), before);
  EXPECT_NE(WeightChecksum(8).Of(r.quanta()), before);
}

TEST(WeightChecksum, HexIsSixteenDigits) {
  EXPECT_EQ(ChecksumHex(0xabcull), "0000000000000abc");
}

}  // namespace
}  // namespace reckon::codec
