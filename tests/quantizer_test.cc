#include "codec/quantizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "absl/strings/str_cat.h"
#include "codec/update_words.h"

namespace reckon::codec {
namespace {

ThresholdStep Step(double threshold, int fraction_bits = 32) {
  absl::StatusOr<ThresholdStep> s = MakeThresholdStep(threshold, fraction_bits);
  EXPECT_TRUE(s.ok()) << s.status();
  return *s;
}

TEST(ThresholdStep, TauIsExactlyStepQuantaQuanta) {
  for (const double t : {0.01, 1e-3, 0.3333333, 1e-9, 2.0, 123.456}) {
    for (const int fb : {8, 16, 24, 32, 40, 62}) {
      absl::StatusOr<ThresholdStep> s = MakeThresholdStep(t, fb);
      if (!s.ok()) continue;  // too small or too large for this grid
      EXPECT_EQ(std::ldexp(static_cast<double>(s->step_quanta), -fb), static_cast<double>(s->tau))
          << "threshold " << t << " fb " << fb;
      EXPECT_NEAR(s->tau, t, t * 1e-6 + std::ldexp(1.0, -fb));
    }
  }
}

TEST(ThresholdStep, RejectsBadThresholds) {
  EXPECT_FALSE(MakeThresholdStep(0, 32).ok());
  EXPECT_FALSE(MakeThresholdStep(-1, 32).ok());
  EXPECT_FALSE(MakeThresholdStep(std::nan(""), 32).ok());
  EXPECT_FALSE(MakeThresholdStep(1e-12, 32).ok());  // below half a quantum
  EXPECT_FALSE(MakeThresholdStep(1e30, 32).ok());   // does not fit
  EXPECT_FALSE(MakeThresholdStep(0.1, 63).ok());
  EXPECT_FALSE(MakeThresholdStep(0.1, -1).ok());
}

// Random residual with values exactly at, just inside and just outside ±tau.
std::vector<float> EdgyResidual(size_t n, float tau, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-3 * tau, 3 * tau);
  std::vector<float> r(n);
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 6) {
      case 0:
        r[i] = tau;
        break;
      case 1:
        r[i] = -tau;
        break;
      case 2:
        r[i] = std::nextafter(tau, 0.0f);
        break;
      case 3:
        r[i] = -std::nextafter(tau, 0.0f);
        break;
      default:
        r[i] = u(rng);
    }
  }
  return r;
}

class QuantizerSizes : public ::testing::TestWithParam<size_t> {};

TEST_P(QuantizerSizes, EmitsExactlyTheRuleAndSubtractsExactlyWhatItEmits) {
  for (const double threshold : {0.01, 0.37, 1e-5}) {
    const ThresholdStep step = Step(threshold);
    const std::vector<float> before = EdgyResidual(GetParam(), step.tau, GetParam() + 3);
    std::vector<float> after = before;
    std::vector<uint32_t> words;
    ASSERT_TRUE(QuantizeResidual(after, step, &words).ok());
    // The rule, written out directly.
    std::vector<uint32_t> expected;
    for (size_t i = 0; i < before.size(); ++i) {
      if (before[i] >= step.tau)
        expected.push_back(PackUpdate(static_cast<uint32_t>(i), false));
      else if (before[i] <= -step.tau)
        expected.push_back(PackUpdate(static_cast<uint32_t>(i), true));
    }
    ASSERT_EQ(words, expected);
    ASSERT_TRUE(ValidateUpdateWords(words, before.size()).ok());
    size_t w = 0;
    for (size_t i = 0; i < before.size(); ++i) {
      const bool emitted = w < words.size() && UpdateIndex(words[w]) == i;
      const double sent = emitted ? (UpdateIsNegative(words[w++]) ? -1.0 : 1.0) * step.tau : 0.0;
      // residual after == residual before - emitted, in float32 arithmetic ...
      const float expected_after = static_cast<float>(before[i] - static_cast<float>(sent));
      ASSERT_EQ(std::memcmp(&after[i], &expected_after, 4), 0) << "element " << i;
      // ... and exactly in real arithmetic where |R| <= 2 tau (Sterbenz).
      if (std::fabs(before[i]) <= 2 * step.tau) {
        ASSERT_EQ(static_cast<double>(after[i]), static_cast<double>(before[i]) - sent)
            << "element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, QuantizerSizes,
                         ::testing::Values(0, 1, 31, 32, 33, 63, 64, 65, (size_t{1} << 20) + 7));

TEST(Quantizer, AllZeroEmitsNothing) {
  std::vector<float> r(1000, 0.0f);
  std::vector<uint32_t> words = {1};
  ASSERT_TRUE(QuantizeResidual(r, Step(0.01), &words).ok());
  EXPECT_TRUE(words.empty());
  EXPECT_EQ(r, std::vector<float>(1000, 0.0f));
}

TEST(Quantizer, AllNegativeAboveThresholdEmitsEverything) {
  const ThresholdStep step = Step(0.01);
  std::vector<float> r(1000, -1.5f * step.tau);
  std::vector<uint32_t> words;
  ASSERT_TRUE(QuantizeResidual(r, step, &words).ok());
  ASSERT_EQ(words.size(), 1000u);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_EQ(words[i], PackUpdate(i, true));
  for (const float x : r) EXPECT_EQ(x, -0.5f * step.tau);
}

TEST(Quantizer, NegativeZeroIsNotEmitted) {
  std::vector<float> r = {-0.0f, 0.0f};
  std::vector<uint32_t> words;
  ASSERT_TRUE(QuantizeResidual(r, Step(0.01), &words).ok());
  EXPECT_TRUE(words.empty());
}

TEST(Quantizer, NanOrInfAnywhereIsAnErrorAndChangesNothing) {
  const ThresholdStep step = Step(0.01);
  for (const float bad :
       {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity()}) {
    for (const size_t where : {size_t{0}, size_t{500}, size_t{4095}}) {
      std::vector<float> r = EdgyResidual(4096, step.tau, 1);
      r[where] = bad;
      const std::vector<float> before = r;
      std::vector<uint32_t> words = {1, 2};
      const absl::Status s = QuantizeResidual(r, step, &words);
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find(std::to_string(where)), std::string::npos) << s;
      EXPECT_TRUE(words.empty());
      EXPECT_EQ(std::memcmp(r.data(), before.data(), r.size() * 4), 0)
          << "residual must be untouched after a NaN/Inf";
    }
  }
}

// Bit for bit (memcmp is not called on an empty vector's null data).
bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// The fused add and threshold (a framework peer's step) against the add
// loop then QuantizeResidual: the same words and residual, bit for bit, at
// sizes around the 64-element chunk; on a NaN or Inf sum, the same error,
// no words and every sum in the residual.
TEST(Quantizer, AddDifferenceAndQuantizeIsTheAddThenQuantizeResidual) {
  const ThresholdStep step = *MakeThresholdStep(0.01, 32);
  for (const size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{10007}}) {
    SCOPED_TRACE(n);
    std::mt19937 rng(static_cast<uint32_t>(n + 3));
    std::normal_distribution<float> normal(0.0f, 0.01f);
    std::vector<float> residual(n), params(n), replica(n);
    for (size_t i = 0; i < n; ++i) {
      residual[i] = normal(rng);
      replica[i] = 10 * normal(rng);
      params[i] = replica[i] + normal(rng);
    }
    std::vector<float> fused = residual;
    std::vector<uint32_t> fused_words = {123};  // replaced
    ASSERT_TRUE(AddDifferenceAndQuantize(fused, params, replica, step, &fused_words).ok());
    for (size_t i = 0; i < n; ++i) residual[i] += params[i] - replica[i];
    std::vector<uint32_t> words;
    ASSERT_TRUE(QuantizeResidual(residual, step, &words).ok());
    EXPECT_EQ(fused_words, words);
    EXPECT_TRUE(SameBits(fused, residual));
    if (n > 1000) {
      EXPECT_GT(words.size(), n / 10);
    }

    if (n < 64) continue;
    params[n / 2] = std::numeric_limits<float>::infinity();
    std::vector<float> sums = fused;
    for (size_t i = 0; i < n; ++i) sums[i] += params[i] - replica[i];
    const absl::Status refused = AddDifferenceAndQuantize(fused, params, replica, step, &words);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(refused.message().find(absl::StrCat("residual element ", n / 2, " is infinite")),
              std::string::npos)
        << refused;
    EXPECT_TRUE(words.empty());
    EXPECT_TRUE(SameBits(fused, sums));
  }
  std::vector<float> one(1);
  std::vector<uint32_t> words;
  EXPECT_EQ(AddDifferenceAndQuantize(one, std::vector<float>(2), one, step, &words).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(Quantizer, FirstNonFiniteFindsTheLowestNanOrInf) {
  std::vector<float> v(1000, 1.0f);
  EXPECT_EQ(FirstNonFinite(v), v.size());
  EXPECT_EQ(FirstNonFinite(std::span<const float>()), 0u);
  v[700] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(FirstNonFinite(v), 700u);
  v[300] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(FirstNonFinite(v), 300u);
  v[299] = std::numeric_limits<float>::max();  // finite
  EXPECT_EQ(FirstNonFinite(v), 300u);
}

TEST(Quantizer, RejectsNonPositiveStep) {
  std::vector<float> r(4, 1.0f);
  std::vector<uint32_t> words;
  EXPECT_FALSE(QuantizeResidual(r, ThresholdStep{32, 0, 0.0f}, &words).ok());
  EXPECT_FALSE(QuantizeResidual(r, ThresholdStep{32, -5, -1.0f}, &words).ok());
}

}  // namespace
}  // namespace reckon::codec
