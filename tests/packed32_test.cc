#include "codec/packed32.h"

#include <gtest/gtest.h>

#include <cstring>

#include "codec/update_words.h"
#include "tests/reference_codec.h"
#include "tests/test_util.h"

namespace reckon::codec {
namespace {

using ::reckon::testing::RandomUpdates;
using ::reckon::testing::ReferenceDecodePacked32;

std::string Bytes(const std::vector<uint32_t>& words) {
  std::string s;
  EncodePacked32(words, &s);
  return s;
}

class Packed32RoundTrip : public ::testing::TestWithParam<uint64_t> {};

TEST_P(Packed32RoundTrip, RoundTripsAndMatchesTheReference) {
  const uint64_t count = GetParam();
  const uint64_t param_count = std::max<uint64_t>(3 * count, 64);
  for (const bool all_negative : {false, true}) {
    const std::vector<uint32_t> words = RandomUpdates(count, param_count, count, all_negative);
    const std::string payload = Bytes(words);
    ASSERT_EQ(payload.size(), 4 * count);
    // Little-endian words, as docs/wire.md §3.1 says, whatever this machine is.
    if (count > 0) {
      const uint32_t w = words[0];
      EXPECT_EQ(static_cast<unsigned char>(payload[0]), w & 0xFF);
      EXPECT_EQ(static_cast<unsigned char>(payload[3]), w >> 24);
    }
    std::vector<uint32_t> decoded;
    ASSERT_TRUE(DecodePacked32(payload, count, param_count, &decoded).ok());
    EXPECT_EQ(decoded, words);
    EXPECT_EQ(ReferenceDecodePacked32(payload, count, param_count), words);
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, Packed32RoundTrip,
                         ::testing::Values(0, 1, 31, 32, 33, (uint64_t{1} << 20) + 7));

TEST(Packed32, LargestIndexWithLargestParamCount) {
  const std::vector<uint32_t> words = {PackUpdate(0, true), PackUpdate((1u << 31) - 1, true)};
  std::vector<uint32_t> decoded;
  ASSERT_TRUE(DecodePacked32(Bytes(words), 2, uint64_t{1} << 31, &decoded).ok());
  EXPECT_EQ(decoded, words);
}

void ExpectDataLoss(std::string_view payload, uint64_t count, uint64_t param_count) {
  std::vector<uint32_t> out = {7};
  const absl::Status s = DecodePacked32(payload, count, param_count, &out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_TRUE(out.empty());
  EXPECT_FALSE(ReferenceDecodePacked32(payload, count, param_count).has_value());
}

TEST(Packed32Rejects, LengthNotFourTimesCount) {
  const std::string p = Bytes({PackUpdate(1, false), PackUpdate(2, false)});
  ExpectDataLoss(p, 3, 100);
  ExpectDataLoss(p, 1, 100);
  ExpectDataLoss(p.substr(0, 7), 2, 100);
}

TEST(Packed32Rejects, UnsortedIndices) {
  ExpectDataLoss(Bytes({PackUpdate(5, false), PackUpdate(3, false)}), 2, 100);
}

TEST(Packed32Rejects, DuplicateIndicesEvenWithDifferentSigns) {
  ExpectDataLoss(Bytes({PackUpdate(5, false), PackUpdate(5, true)}), 2, 100);
}

TEST(Packed32Rejects, IndexAtOrAboveParamCount) {
  ExpectDataLoss(Bytes({PackUpdate(1, false), PackUpdate(100, false)}), 2, 100);
}

TEST(Packed32Rejects, CountAboveParamCount) {
  ExpectDataLoss(Bytes({PackUpdate(0, false), PackUpdate(1, false)}), 2, 1);
}

TEST(Packed32Rejects, ParamCountAbove2To31) {
  ExpectDataLoss(Bytes({PackUpdate(0, false)}), 1, (uint64_t{1} << 31) + 1);
}

}  // namespace
}  // namespace reckon::codec
