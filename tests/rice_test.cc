#include "codec/rice.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "codec/update_words.h"
#include "tests/reference_codec.h"
#include "tests/test_util.h"

namespace reckon::codec {
namespace {

using ::reckon::testing::RandomUpdates;
using ::reckon::testing::ReferenceDecodeRice;
using ::reckon::testing::ReferenceEncodeRice;

// Sizes: empty, one, around a 32-bit word, and a large odd one; param_count
// leaves room for gaps of every k.
class RiceRoundTrip : public ::testing::TestWithParam<uint64_t> {};

TEST_P(RiceRoundTrip, EveryKRoundTripsAndMatchesTheReference) {
  const uint64_t count = GetParam();
  const uint64_t param_count = std::max<uint64_t>(4 * count, 64);
  for (const bool all_negative : {false, true}) {
    const std::vector<uint32_t> words =
        RandomUpdates(count, param_count, /*seed=*/count + 7, all_negative);
    for (uint32_t k = 0; k <= kMaxRiceK; ++k) {
      std::string payload;
      EncodeRice(words, k, &payload);
      EXPECT_EQ(payload.size(), (RiceEncodedBits(words, k) + 7) / 8) << "k=" << k;
      std::vector<uint32_t> decoded;
      ASSERT_TRUE(DecodeRice(payload, count, k, param_count, &decoded).ok()) << "k=" << k;
      EXPECT_EQ(decoded, words) << "k=" << k;
      if (count <= 33) {
        // Bit-for-bit against the one-bit-at-a-time encoder and decoder.
        EXPECT_EQ(payload, ReferenceEncodeRice(words, k)) << "k=" << k;
        EXPECT_EQ(ReferenceDecodeRice(payload, count, k, param_count), words) << "k=" << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, RiceRoundTrip,
                         ::testing::Values(0, 1, 31, 32, 33, (uint64_t{1} << 20) + 7));

TEST(Rice, AllConsecutiveIndicesAllNegative) {
  // Every gap zero, every sign set.
  std::vector<uint32_t> words;
  for (uint32_t i = 0; i < 1000; ++i) words.push_back(PackUpdate(i, true));
  const uint32_t k = OptimalRiceK(words);
  EXPECT_EQ(k, 0u);
  std::string payload;
  EncodeRice(words, k, &payload);
  EXPECT_EQ(payload.size(), 1000u * 2 / 8);  // one stop bit + one sign bit each
  std::vector<uint32_t> decoded;
  ASSERT_TRUE(DecodeRice(payload, words.size(), k, 1000, &decoded).ok());
  EXPECT_EQ(decoded, words);
}

TEST(Rice, LargestIndexWithLargestParamCountEveryK) {
  const uint64_t param_count = uint64_t{1} << 31;
  const std::vector<uint32_t> words = {PackUpdate(0, false), PackUpdate(12345, true),
                                       PackUpdate((1u << 31) - 2, false),
                                       PackUpdate((1u << 31) - 1, true)};
  for (uint32_t k = 0; k <= kMaxRiceK; ++k) {
    std::string payload;
    EncodeRice(words, k, &payload);
    std::vector<uint32_t> decoded;
    ASSERT_TRUE(DecodeRice(payload, words.size(), k, param_count, &decoded).ok()) << "k=" << k;
    EXPECT_EQ(decoded, words) << "k=" << k;
  }
}

TEST(Rice, OptimalKIsTheBruteForceMinimum) {
  for (const double density : {0.5, 0.1, 0.01, 1e-3, 1e-4}) {
    const uint64_t param_count = 2'000'000;
    const std::vector<uint32_t> words =
        RandomUpdates(static_cast<uint64_t>(param_count * density), param_count, 99);
    uint64_t best_bits = UINT64_MAX;
    uint32_t best_k = 0;
    for (uint32_t k = 0; k <= kMaxRiceK; ++k) {
      const uint64_t bits = RiceEncodedBits(words, k);
      if (bits < best_bits) {
        best_bits = bits;
        best_k = k;
      }
    }
    EXPECT_EQ(OptimalRiceK(words), best_k) << "density " << density;
  }
  // A skewed set: many tiny gaps and one enormous one.
  std::vector<uint32_t> skewed;
  for (uint32_t i = 0; i < 100; ++i) skewed.push_back(PackUpdate(i, false));
  skewed.push_back(PackUpdate(2'000'000'000u, true));
  uint64_t best_bits = UINT64_MAX;
  uint32_t best_k = 0;
  for (uint32_t k = 0; k <= kMaxRiceK; ++k) {
    if (RiceEncodedBits(skewed, k) < best_bits) {
      best_bits = RiceEncodedBits(skewed, k);
      best_k = k;
    }
  }
  EXPECT_EQ(OptimalRiceK(skewed), best_k);
}

// --- the two-chain rounds (rice.h) give the one chain's words and refusals ---

// Updates whose gaps change character along the message, as a model's
// layers do: a dense stretch (quotient 0 at its k), a sparse one (long
// unary codes that do not fit a group), and a uniform one.
std::vector<uint32_t> LayeredUpdates(uint64_t param_count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> words;
  for (uint64_t index = 0; index < param_count;) {
    const uint64_t stretch = index * 3 / param_count;  // 0, 1, 2
    words.push_back(PackUpdate(static_cast<uint32_t>(index), (rng() & 1) != 0));
    const uint64_t gap = stretch == 0 ? rng() % 3 : stretch == 1 ? rng() % 20'000 : rng() % 400;
    index += gap + 1;
  }
  return words;
}

// Every tuning against the one chain: the rounds' sizes from a few codes
// (so that every message is many rounds, and the chains meet near every
// kind of code) to the default; the indices' sums in every copy (AVX-512
// and AVX2 where the CPU has them; a copy it lacks decodes one chain).
const RiceDecodeTuning kTunings[] = {
    {4, Isa::kBest},    {4, Isa::kAvx2},    {4, Isa::kPortable},
    {37, Isa::kBest},   {37, Isa::kAvx2},   {37, Isa::kPortable},
    {1024, Isa::kBest}, {1024, Isa::kAvx2}, {1024, Isa::kPortable}};

TEST(RiceTwoChains, EveryTuningGivesTheOneChainsWords) {
  const RiceDecodeTuning one_chain{0, Isa::kPortable};
  std::vector<std::vector<uint32_t>> sets;
  for (const double density : {0.5, 0.1, 0.01, 0.003, 1e-3}) {
    sets.push_back(RandomUpdates(static_cast<uint64_t>(600'000 * density), 600'000, 11));
  }
  sets.push_back(LayeredUpdates(3'000'000, 12));
  for (const std::vector<uint32_t>& words : sets) {
    const uint32_t best = OptimalRiceK(words);
    // The optimal k, and others (a sender may choose any k): long unary
    // codes below it, wide remainders above it.
    for (const uint32_t k : {best, best > 2 ? best - 3 : 0u, std::min(best + 4, kMaxRiceK)}) {
      std::string payload;
      EncodeRice(words, k, &payload);
      const uint64_t param_count = UpdateIndex(words.back()) + 1;
      std::vector<uint32_t> expected;
      ASSERT_TRUE(DecodeRice(payload, words.size(), k, param_count, &expected, one_chain).ok());
      ASSERT_EQ(expected, words);
      for (const RiceDecodeTuning& tuning : kTunings) {
        std::vector<uint32_t> decoded;
        ASSERT_TRUE(DecodeRice(payload, words.size(), k, param_count, &decoded, tuning).ok())
            << words.size() << " words, k " << k << ", rounds of " << tuning.round_codes;
        EXPECT_EQ(decoded, words) << words.size() << " words, k " << k << ", rounds of "
                                  << tuning.round_codes << ", indices "
                                  << ElementwiseCopy(tuning.indices);
      }
    }
  }
}

TEST(RiceTwoChains, EveryTuningRefusesWhatTheOneChainRefusesWithItsWords) {
  const RiceDecodeTuning one_chain{0, Isa::kPortable};
  const std::vector<uint32_t> words = RandomUpdates(30'000, 3'000'000, 13);
  const uint32_t k = OptimalRiceK(words);
  std::string payload;
  EncodeRice(words, k, &payload);
  const uint64_t last = UpdateIndex(words.back());
  std::mt19937_64 rng(14);
  struct Case {
    std::string payload;
    uint64_t count;
    uint64_t param_count;
  };
  std::vector<Case> cases = {
      {payload, words.size(), last},                        // the last index == param_count
      {payload, words.size(), UpdateIndex(words[15'000])},  // one mid-message
      {payload.substr(0, payload.size() - 3), words.size(), 3'000'000},
      {payload + std::string(1, '\0'), words.size(), 3'000'000},
      {payload, words.size() - 1, 3'000'000},  // a code after the last
      {payload, words.size() + 1, 3'000'000},
      {std::string(payload.size(), '\0'), words.size() / 40, 3'000'000},  // one long zero run
  };
  // Flipped bits anywhere (most decode to other words or to a refusal).
  for (int flip = 0; flip < 300; ++flip) {
    std::string bad = payload;
    const uint64_t bit = rng() % (bad.size() * 8);
    bad[bit / 8] = static_cast<char>(static_cast<unsigned char>(bad[bit / 8]) ^ (1u << (bit % 8)));
    cases.push_back({bad, words.size(), 3'000'000});
  }
  int refused = 0;
  for (const Case& c : cases) {
    std::vector<uint32_t> expected;
    const absl::Status one = DecodeRice(c.payload, c.count, k, c.param_count, &expected, one_chain);
    refused += !one.ok();
    for (const RiceDecodeTuning& tuning : kTunings) {
      std::vector<uint32_t> decoded = {7};
      const absl::Status s = DecodeRice(c.payload, c.count, k, c.param_count, &decoded, tuning);
      EXPECT_EQ(s, one) << "rounds of " << tuning.round_codes;
      EXPECT_EQ(decoded, expected) << "rounds of " << tuning.round_codes;
    }
  }
  EXPECT_GE(refused, 7) << "the cases above are refusals";
}

// --- every rejection docs/wire.md §3.2 lists, one test each ---

class RiceRejects : public ::testing::Test {
 protected:
  void SetUp() override {
    words_ = RandomUpdates(100, 10'000, 5);
    k_ = OptimalRiceK(words_);
    EncodeRice(words_, k_, &payload_);
  }
  void ExpectDataLoss(std::string_view payload, uint64_t count, uint32_t k, uint64_t params) {
    std::vector<uint32_t> out = {1, 2, 3};
    const absl::Status s = DecodeRice(payload, count, k, params, &out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_TRUE(out.empty()) << "nothing may come out of a rejected payload";
    EXPECT_FALSE(ReferenceDecodeRice(payload, count, k, params).has_value());
  }
  std::vector<uint32_t> words_;
  uint32_t k_ = 0;
  std::string payload_;
};

TEST_F(RiceRejects, KAbove30) { ExpectDataLoss(payload_, words_.size(), 31, 10'000); }

TEST_F(RiceRejects, CountAboveParamCount) { ExpectDataLoss(payload_, 10'001, k_, 10'000); }

TEST_F(RiceRejects, ParamCountAbove2To31) {
  ExpectDataLoss(payload_, words_.size(), k_, (uint64_t{1} << 31) + 1);
}

TEST_F(RiceRejects, IndexAtOrAboveParamCount) {
  const uint64_t last = UpdateIndex(words_.back());
  ExpectDataLoss(payload_, words_.size(), k_, last);  // last index == param_count
}

TEST_F(RiceRejects, StreamEndsEarly) {
  ExpectDataLoss(payload_.substr(0, payload_.size() - 2), words_.size(), k_, 10'000);
  ExpectDataLoss(payload_, words_.size() + 1, k_, 10'000);
  ExpectDataLoss("", 1, 0, 10);
}

TEST_F(RiceRejects, NonZeroPaddingBits) {
  // Index 3 at k = 0: "0001" then the sign: 5 bits, so 3 bits of padding.
  const std::vector<uint32_t> one = {PackUpdate(3, true)};
  std::string payload;
  EncodeRice(one, 0, &payload);
  ASSERT_EQ(payload.size(), 1u);
  std::vector<uint32_t> decoded;
  ASSERT_TRUE(DecodeRice(payload, 1, 0, 10, &decoded).ok());
  for (int bit = 5; bit < 8; ++bit) {
    std::string bad = payload;
    bad[0] = static_cast<char>(static_cast<unsigned char>(bad[0]) | (1u << bit));
    ExpectDataLoss(bad, 1, 0, 10);
  }
}

TEST_F(RiceRejects, BytesAfterThePadding) {
  ExpectDataLoss(payload_ + std::string(1, '\0'), words_.size(), k_, 10'000);
}

TEST_F(RiceRejects, HugeCountIsRefusedWithoutAllocatingForIt) {
  // 2^31 claimed updates in 10 bytes: must fail fast, not reserve 8 GiB.
  ExpectDataLoss(std::string(10, '\xff'), uint64_t{1} << 31, 0, uint64_t{1} << 31);
}

TEST_F(RiceRejects, LongZeroRunPastTheEnd) {
  ExpectDataLoss(std::string(1000, '\0'), 1, 0, uint64_t{1} << 31);
}

}  // namespace
}  // namespace reckon::codec
