// The CUDA kernels' per-element arithmetic (cuda/device_elementwise.h) against the
// CPU backend's own code, bit for bit, on the host: what the device computes
// element by element is checked in every build, GPU or not. (The kernels
// that call these functions are checked on a GPU by cuda_backend_test.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "codec/quantizer.h"
#include "codec/update_words.h"
#include "cuda/device_elementwise.h"
#include "model/optimizer.h"

namespace reckon::cuda {
namespace {

std::vector<float> Normal(size_t n, float scale, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

OptimizerRule RuleOf(const model::OptimizerConfig& config, float lr) {
  OptimizerRule rule;
  rule.kind = config.kind == model::OptimizerKind::kSgd        ? 0
              : config.kind == model::OptimizerKind::kMomentum ? 1
                                                               : 2;
  rule.lr = lr;
  rule.momentum = static_cast<float>(config.momentum);
  rule.eps = static_cast<float>(config.adagrad_eps);
  rule.weight_decay = static_cast<float>(config.weight_decay);
  return rule;
}

TEST(CudaElementwise, TheOptimizerRulesAreBitExactWithAccumulateDelta) {
  const size_t n = 100'000;
  const float lr = 0.037f;
  for (const model::OptimizerKind kind :
       {model::OptimizerKind::kSgd, model::OptimizerKind::kMomentum,
        model::OptimizerKind::kAdagrad}) {
    for (const double weight_decay : {0.0, 3e-4}) {
      SCOPED_TRACE(::testing::Message() << model::OptimizerName(kind) << " wd " << weight_decay);
      model::OptimizerConfig config;
      config.kind = kind;
      config.momentum = 0.9;
      config.weight_decay = weight_decay;
      const std::vector<float> grad = Normal(n, 0.05f, 1), weights = Normal(n, 0.3f, 2);
      std::vector<float> state = Normal(n, 0.01f, 3), residual = Normal(n, 0.002f, 4);
      if (kind == model::OptimizerKind::kAdagrad) {
        for (float& h : state) h = std::fabs(h);
      }
      std::vector<float> device_state = state, device_residual = residual;
      const OptimizerRule rule = RuleOf(config, lr);
      for (size_t i = 0; i < n; ++i) {
        const float g = WithWeightDecay(rule, grad[i], weights[i]);
        device_residual[i] = AddRn(device_residual[i], OptimizerDelta(rule, g, &device_state[i]));
      }
      model::AccumulateDelta(config, lr, grad, weights, state, residual, {});
      size_t differ = 0;
      for (size_t i = 0; i < n; ++i) {
        differ += !SameBits(device_residual[i], residual[i]) ||
                  (kind != model::OptimizerKind::kSgd && !SameBits(device_state[i], state[i]));
      }
      EXPECT_EQ(differ, 0u) << "elements whose residual or state differ";
    }
  }
}

// AdaGrad on the aggregate: the peers' movement measured from the
// replica's quanta (PeerStep, as the CPU backend's MeasurePeerStep) and
// the rule (AdagradAggregateDelta) against AccumulateDelta with peer_step;
// and with no movement, the local rule's bits.
TEST(CudaElementwise, AggregateAdagradIsBitExactWithAccumulateDelta) {
  const size_t n = 100'000;
  const float lr = 0.037f;
  const double quantum = std::ldexp(1.0, -32);
  for (const double weight_decay : {0.0, 3e-4}) {
    SCOPED_TRACE(::testing::Message() << "wd " << weight_decay);
    model::OptimizerConfig config;
    config.kind = model::OptimizerKind::kAdagrad;
    config.adagrad_placement = model::AdagradPlacement::kAggregate;
    config.weight_decay = weight_decay;
    const std::vector<float> grad = Normal(n, 0.05f, 5), weights = Normal(n, 0.3f, 6);
    std::vector<float> state = Normal(n, 0.01f, 7), residual = Normal(n, 0.002f, 8);
    for (float& h : state) h = std::fabs(h);
    // The replica after this worker's own step, and now: the peers moved
    // one weight in three by up to a few tau, some across the int64 ends.
    std::mt19937_64 rng(9);
    std::vector<int64_t> after_own(n), now(n);
    std::vector<float> peer_step(n);
    for (size_t i = 0; i < n; ++i) {
      after_own[i] = static_cast<int64_t>(rng());
      const int64_t moved =
          i % 3 == 0 ? static_cast<int64_t>(rng() % (int64_t{1} << 26)) - (int64_t{1} << 25) : 0;
      now[i] =
          static_cast<int64_t>(static_cast<uint64_t>(after_own[i]) + static_cast<uint64_t>(moved));
      peer_step[i] = static_cast<float>(static_cast<double>(moved) * quantum);
    }
    std::vector<float> device_state = state, device_residual = residual;
    std::vector<float> local_state = state, local_residual = residual;
    const OptimizerRule rule = RuleOf(config, lr);
    size_t moved_apart = 0;
    for (size_t i = 0; i < n; ++i) {
      const float g = WithWeightDecay(rule, grad[i], weights[i]);
      const float p = PeerStep(now[i], after_own[i], quantum);
      ASSERT_TRUE(SameBits(p, peer_step[i])) << i;
      device_residual[i] =
          AddRn(device_residual[i], AdagradAggregateDelta(rule, g, p, &device_state[i]));
      local_residual[i] = AddRn(local_residual[i], OptimizerDelta(rule, g, &local_state[i]));
      if (p == 0.0f) {
        ASSERT_TRUE(SameBits(device_residual[i], local_residual[i])) << i;
        ASSERT_TRUE(SameBits(device_state[i], local_state[i])) << i;
      } else {
        moved_apart += !SameBits(device_state[i], local_state[i]);
      }
    }
    EXPECT_GT(moved_apart, n / 4) << "the peers' movement should change AdaGrad's h";
    model::AccumulateDelta(config, lr, grad, weights, state, residual, peer_step);
    size_t differ = 0;
    for (size_t i = 0; i < n; ++i) {
      differ += !SameBits(device_residual[i], residual[i]) || !SameBits(device_state[i], state[i]);
    }
    EXPECT_EQ(differ, 0u) << "elements whose residual or state differ";
  }
}

TEST(CudaElementwise, TheThresholdRuleIsBitExactWithQuantizeResidual) {
  const absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.01, 32);
  ASSERT_TRUE(step.ok());
  const float tau = step->tau;
  std::vector<float> residual = Normal(200'000, 2 * tau, 5);
  // The edges: exactly +-tau, the floats beside them, zero and minus zero.
  const float edges[] = {
      tau,  -tau, std::nextafter(tau, 0.0f), std::nextafter(-tau, 0.0f), std::nextafter(tau, 1.0f),
      0.0f, -0.0f};
  for (size_t k = 0; k < std::size(edges); ++k) residual[k * 1000] = edges[k];
  std::vector<float> device = residual;
  std::vector<uint32_t> device_words;
  for (size_t i = 0; i < device.size(); ++i) {
    const int sign = ThresholdElement(device[i], tau, &device[i]);
    ASSERT_NE(sign, kThresholdNonFinite);
    if (sign != 0) device_words.push_back((sign < 0 ? 0x80000000u : 0u) | uint32_t(i));
  }
  std::vector<uint32_t> words;
  ASSERT_TRUE(codec::QuantizeResidual(residual, *step, &words).ok());
  EXPECT_EQ(device_words, words);
  EXPECT_EQ(std::memcmp(device.data(), residual.data(), residual.size() * sizeof(float)), 0);
  EXPECT_GT(words.size(), 1000u);
}

// The dense fp32 codec with error feedback (pre-training's step on the
// device) against codec::EncodeWithFeedback, at two grids.
TEST(CudaElementwise, TheDenseCodecIsBitExactWithEncodeWithFeedback) {
  for (const int fraction_bits : {32, 8}) {
    SCOPED_TRACE(::testing::Message() << "fraction bits " << fraction_bits);
    const double quantum = std::ldexp(1.0, -fraction_bits);
    std::vector<float> residual = Normal(100'000, static_cast<float>(40 * quantum), 6);
    // Ties (half quanta, both signs), beside them, large values, zeros.
    const float q = static_cast<float>(quantum);
    const float edges[] = {0.5f * q,  -0.5f * q,    1.5f * q,
                           -2.5f * q, 0.0f,         -0.0f,
                           3e5f * q,  -7.25e6f * q, 1.0e7f * q + 0.5f * q};
    for (size_t k = 0; k < std::size(edges); ++k) residual[k * 997] = edges[k];
    std::vector<float> device = residual;
    std::vector<int64_t> device_quanta(residual.size());
    const int32_t limit = DenseLimitBits(fraction_bits);
    for (size_t i = 0; i < device.size(); ++i) {
      ASSERT_FALSE(DenseValueRefused(device[i], limit)) << i;
      device_quanta[i] = DenseQuanta(device[i], fraction_bits);
      device[i] = DenseFeedback(device[i], device_quanta[i], quantum);
    }
    codec::CodecOptions options;
    options.codec = v1::CODEC_DENSE_FP32;
    options.fraction_bits = fraction_bits;
    options.error_feedback = true;
    options.layout = {{1, static_cast<uint32_t>(residual.size())}};
    absl::StatusOr<std::unique_ptr<codec::Codec>> dense = codec::MakeCodec(options);
    ASSERT_TRUE(dense.ok()) << dense.status();
    v1::Update message;
    std::vector<int64_t> quanta;
    const absl::Status encoded =
        codec::EncodeWithFeedback(**dense, options, residual, &message, &quanta);
    ASSERT_TRUE(encoded.ok()) << encoded;
    EXPECT_EQ(device_quanta, codec::EmittedQuanta(message, quanta).ToVector());
    EXPECT_EQ(std::memcmp(device.data(), residual.data(), residual.size() * sizeof(float)), 0)
        << "residuals differ";
  }
}

TEST(CudaElementwise, TheDenseCodecRefusesWhatEncodeWithFeedbackRefuses) {
  const int fraction_bits = 32;
  const int32_t limit = DenseLimitBits(fraction_bits);
  const float at_limit = std::ldexp(1.0f, 62 - fraction_bits);
  for (const float v : {at_limit, -at_limit, std::nanf(""), INFINITY}) {
    EXPECT_TRUE(DenseValueRefused(v, limit)) << v;
  }
  const float below = std::nextafter(at_limit, 0.0f);
  EXPECT_FALSE(DenseValueRefused(below, limit));
  EXPECT_FALSE(DenseValueRefused(-below, limit));
  // The CPU: the same two sides of the limit.
  codec::CodecOptions options;
  options.fraction_bits = fraction_bits;
  options.layout = {{1, 2}};
  absl::StatusOr<std::unique_ptr<codec::Codec>> dense = codec::MakeCodec(options);
  ASSERT_TRUE(dense.ok());
  v1::Update message;
  std::vector<int64_t> quanta;
  std::vector<float> refused = {0.0f, at_limit};
  EXPECT_FALSE(codec::EncodeWithFeedback(**dense, options, refused, &message, &quanta).ok());
  std::vector<float> taken = {0.0f, below};
  EXPECT_TRUE(codec::EncodeWithFeedback(**dense, options, taken, &message, &quanta).ok());
  EXPECT_EQ(codec::EmittedQuanta(message, quanta)[1], DenseQuanta(below, fraction_bits));
}

TEST(CudaElementwise, ANonFiniteValueIsReportedAndKept) {
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    float out = 0;
    EXPECT_EQ(ThresholdElement(bad, 0.01f, &out), kThresholdNonFinite);
    EXPECT_EQ(std::isnan(out), std::isnan(bad));
    if (!std::isnan(bad)) {
      EXPECT_EQ(out, bad);
    }
  }
}

// The apply kernels' addition and wrap count against the host replica's:
// the same quanta and the same count of additions that left the int64
// range, through steps and dense messages at both ends of the range.
TEST(CudaElementwise, TheAddAndItsWrapCountAreTheHostReplicas) {
  const std::vector<int64_t> start = {INT64_MAX, INT64_MIN, INT64_MAX - 5, INT64_MIN + 5, 0, -7};
  absl::StatusOr<codec::FixedPointReplica> host = codec::FixedPointReplica::Create(
      start.size(), 32, codec::FixedPointReplica::FloatCopy::kNone);
  ASSERT_TRUE(host.ok()) << host.status();
  ASSERT_TRUE(host->Load(start).ok());
  std::vector<int64_t> device = start;
  uint64_t device_wrapped = 0;
  // Threshold words: +10 at 0, 2, 4; -10 at 1, 3, 5.
  const int64_t step = 10;
  std::vector<uint32_t> words;
  for (uint32_t i = 0; i < start.size(); ++i) words.push_back(codec::PackUpdate(i, i % 2 == 1));
  ASSERT_TRUE(host->Apply(step, words).ok());
  for (const uint32_t w : words) {
    bool wraps;
    const uint32_t i = codec::UpdateIndex(w);
    device[i] = WrappingAdd(device[i], codec::UpdateIsNegative(w) ? -step : step, &wraps);
    device_wrapped += wraps;
  }
  // A dense message that takes 0 and 1 back across.
  const std::vector<int64_t> dense = {-10, 10, 0, 0, 1, INT64_MAX};
  ASSERT_TRUE(host->ApplyDense(dense).ok());
  for (size_t i = 0; i < dense.size(); ++i) {
    bool wraps;
    device[i] = WrappingAdd(device[i], dense[i], &wraps);
    device_wrapped += wraps;
  }
  EXPECT_EQ(device, std::vector<int64_t>(host->quanta().begin(), host->quanta().end()));
  EXPECT_EQ(device_wrapped, host->wrapped());
  EXPECT_EQ(host->wrapped(), 6u);  // 0, 1, 2, 3 by the steps; 0 and 1 back
}

// codec::QuantaPayloadValue as the device computes it, over magnitudes from
// far below a quantum to past the 2^62 clamp, ties, both signs and zeros.
TEST(CudaElementwise, ThePayloadValueIsQuantaPayloadValue) {
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<double> exponent(-40.0, 70.0);
  std::vector<double> values = {0.0,
                                -0.0,
                                0.5,
                                -0.5,
                                1.5,
                                2.5,
                                -2.5,
                                8388607.5,
                                8388608.5,
                                4611686018427387904.0,
                                -4611686018427387904.0,
                                1e300,
                                -1e300};
  for (int k = 0; k < 200'000; ++k) {
    const double v = std::exp2(exponent(rng)) * ((k & 1) ? -1.0 : 1.0);
    values.push_back(v);
    values.push_back(std::nearbyint(v * 2.0) / 2.0);  // ties where representable
  }
  for (const int fraction_bits : {0, 8, 32, 62}) {
    for (const double v : values) {
      const double units = std::ldexp(v, -fraction_bits);
      ASSERT_TRUE(SameBits(PayloadValue(units, fraction_bits),
                           codec::QuantaPayloadValue(units, fraction_bits)))
          << v << " at fb " << fraction_bits;
    }
  }
}

// The device's nearest-code search against the host's bucketed one, on and
// beside every midpoint and over the whole range.
TEST(CudaElementwise, TheDynTreeCodeSearchIsDynTreeNearestCode) {
  const double* mids = codec::DynTreeMidpoints();
  std::vector<double> values = {0.0, -0.0, 1.0, 2.0, 1e-30, std::nan(""), 0.9999999};
  for (int j = 0; j < 127; ++j) {
    values.push_back(mids[j]);
    values.push_back(std::nextafter(mids[j], 0.0));
    values.push_back(std::nextafter(mids[j], 2.0));
  }
  std::mt19937_64 rng(12);
  std::uniform_real_distribution<double> exponent(-25.0, 0.5);
  for (int k = 0; k < 500'000; ++k) values.push_back(std::exp2(exponent(rng)));
  for (const double v : values) {
    ASSERT_EQ(DynTreeCodeBelow(v, mids), codec::DynTreeNearestCode(v)) << v;
  }
}

// What the device codec's kernels compute (cuda/codec_kernels.cu), replayed
// on the host with the same functions and the same layout of the work:
// accumulate and check, onebit's columns then signs and quanta, or
// dyntree8's abs max, tables and codes; then error feedback and the
// message from its parts (codec::FinishOneBitMessage, FinishDynTree8Message).
class DeviceCodecReplay {
 public:
  explicit DeviceCodecReplay(const codec::CodecOptions& options)
      : options_(options), scales_(options.layout.size(), 0.0f) {}

  // false (nothing changed but the residual's accumulate) when refused.
  bool Encode(std::span<const float> delta, std::vector<float>* residual, v1::Update* msg,
              std::vector<int64_t>* quanta) {
    const int fb = options_.fraction_bits;
    const double quantum = std::ldexp(1.0, -fb);
    const size_t n = residual->size();
    uint64_t first_bad = ~0ull;
    for (size_t i = 0; i < n; ++i) {
      (*residual)[i] = AddRn((*residual)[i], delta[i]);
      if (DenseValueRefused((*residual)[i], DenseLimitBits(fb)))
        first_bad = std::min<uint64_t>(first_bad, i);
    }
    if (first_bad != ~0ull) return false;
    float* r = residual->data();
    quanta->assign(n, 0);
    auto feedback = [&](size_t i, int64_t q) {
      r[i] = options_.error_feedback ? DenseFeedback(r[i], q, quantum) : 0.0f;
    };
    if (options_.codec == v1::CODEC_ONEBIT) {
      std::vector<float> column_values;
      std::vector<size_t> column_of(n);
      size_t offset = 0, column_base = 0;
      for (const codec::TensorShape& t : options_.layout) {
        for (uint32_t c = 0; c < t.cols; ++c) {
          const OneBitColumnValues v = OneBitColumn(r + offset + c, t.rows, t.cols, fb);
          column_values.push_back(v.plus);
          column_values.push_back(v.minus);
        }
        for (uint64_t e = 0; e < t.size(); ++e) column_of[offset + e] = column_base + e % t.cols;
        offset += t.size();
        column_base += t.cols;
      }
      std::vector<uint32_t> words((n + 31) / 32, 0);
      for (size_t i = 0; i < n; ++i) {
        const bool non_negative = r[i] >= 0.0f;
        const auto q =
            static_cast<int64_t>(column_values[2 * column_of[i] + (non_negative ? 0 : 1)]);
        (*quanta)[i] = q;
        words[i / 32] |= uint32_t{non_negative} << (i % 32);
        feedback(i, q);
      }
      std::vector<uint8_t> signs((n + 7) / 8);
      std::memcpy(signs.data(), words.data(), signs.size());  // little-endian, as the device's
      codec::FinishOneBitMessage(options_.layout, column_values, signs, msg);
    } else {
      const bool rescale = steps_ % static_cast<uint64_t>(options_.absmax_every) == 0;
      std::vector<uint8_t> codes(n);
      size_t offset = 0;
      for (size_t t = 0; t < options_.layout.size(); ++t) {
        const uint64_t size = options_.layout[t].size();
        if (rescale) {
          uint32_t absmax_bits = 0;
          for (uint64_t e = 0; e < size; ++e) {
            absmax_bits = std::max(absmax_bits, FloatBits(r[offset + e]) & 0x7FFFFFFFu);
          }
          scales_[t] = std::min(PayloadValue(double(BitsFloat(absmax_bits)), fb), 0x1p52f);
        }
        const auto scale = static_cast<int64_t>(scales_[t]);
        int64_t table[128];
        for (uint32_t m = 0; m < 128; ++m) {
          const codec::DynTreeFraction f = codec::DynTreeMagnitude(m);
          const auto s = static_cast<uint64_t>(scale);
          table[m] =
              static_cast<int64_t>((2 * s * f.numerator + f.denominator) / (2 * f.denominator));
        }
        const double to_normalized =
            scale > 0 ? DivRnD(double(uint64_t{1} << fb), double(scale)) : 0.0;
        for (uint64_t e = 0; e < size; ++e) {
          const int64_t q = DynTree8Element(r[offset + e], to_normalized, table,
                                            codec::DynTreeMidpoints(), &codes[offset + e]);
          (*quanta)[offset + e] = q;
          feedback(offset + e, q);
        }
        offset += size;
      }
      codec::FinishDynTree8Message(options_.layout, scales_, codes, msg);
      ++steps_;
    }
    return true;
  }

 private:
  codec::CodecOptions options_;
  std::vector<float> scales_;
  uint64_t steps_ = 0;
};

// Several steps of each codec, replayed as the device runs them, against
// codec::EncodeWithFeedback with the host codec: the same message bytes,
// quanta and residual after every step (feedback on and off; dyntree8
// rescaling every step and every third; a column of all non-negative and
// one of all negative values; a tensor of zeros; a NaN refused alike).
TEST(CudaElementwise, TheDeviceCodecsAreBitExactWithTheHostCodecs) {
  const codec::TensorLayout layout = {{37, 29}, {37, 1}, {10, 37}, {10, 1}, {3, 5}};
  const size_t n = codec::LayoutParamCount(layout);
  for (const v1::Codec id : {v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8}) {
    for (const bool error_feedback : {true, false}) {
      for (const int absmax_every : {1, 3}) {
        if (id == v1::CODEC_ONEBIT && absmax_every != 1) continue;
        SCOPED_TRACE(::testing::Message() << codec::CodecFlagName(id) << " feedback "
                                          << error_feedback << " absmax_every " << absmax_every);
        codec::CodecOptions options;
        options.codec = id;
        options.layout = layout;
        options.fraction_bits = 24;
        options.error_feedback = error_feedback;
        options.absmax_every = absmax_every;
        absl::StatusOr<std::unique_ptr<codec::Codec>> host = codec::MakeCodec(options);
        ASSERT_TRUE(host.ok()) << host.status();
        DeviceCodecReplay device(options);
        std::vector<float> host_residual(n, 0.0f), device_residual(n, 0.0f);
        for (int step = 0; step < 7; ++step) {
          std::vector<float> delta = Normal(n, step < 3 ? 1e-3f : 3e-2f, 100 + step);
          for (uint32_t r = 0; r < 37; ++r) {
            delta[r * 29 + 3] = std::fabs(delta[r * 29 + 3]);           // column 3: all >= 0
            delta[r * 29 + 4] = -std::fabs(delta[r * 29 + 4]) - 1e-6f;  // column 4: all < 0
          }
          const size_t zeros_at = n - 15;  // the 3x5 tensor: zeros (scale 0)
          for (size_t k = zeros_at; k < n; ++k) delta[k] = step == 0 ? -0.0f : 0.0f;
          if (error_feedback) {
            for (size_t k = zeros_at; k < n; ++k) host_residual[k] = device_residual[k] = 0.0f;
          }
          const bool refuse = step == 5;
          if (refuse) delta[777] = std::nanf("");
          for (size_t i = 0; i < n; ++i) host_residual[i] += delta[i];
          v1::Update host_msg, device_msg;
          std::vector<int64_t> host_quanta, device_quanta;
          // The host accumulates first (the backend does), then encodes.
          const absl::Status host_status =
              codec::EncodeWithFeedback(**host, options, host_residual, &host_msg, &host_quanta);
          const bool device_ok =
              device.Encode(delta, &device_residual, &device_msg, &device_quanta);
          ASSERT_EQ(device_ok, host_status.ok()) << "step " << step << ": " << host_status;
          if (refuse) {
            EXPECT_NE(host_status.message().find("residual element 777"), std::string::npos);
            host_residual[777] = device_residual[777] = 0.0f;  // both kept R + NaN: clear it
          } else {
            EXPECT_EQ(device_msg.payload(), host_msg.payload()) << "step " << step;
            EXPECT_EQ(device_msg.crc32c(), host_msg.crc32c());
            EXPECT_EQ(device_msg.codec(), host_msg.codec());
            EXPECT_EQ(device_msg.param_count(), host_msg.param_count());
            EXPECT_EQ(device_msg.count(), host_msg.count());
            EXPECT_EQ(device_quanta, host_quanta) << "step " << step;
            std::vector<int64_t> decoded;
            ASSERT_TRUE(codec::DecodeQuantaPayload(device_msg, &decoded).ok());
            EXPECT_EQ(decoded, device_quanta);
          }
          ASSERT_EQ(std::memcmp(device_residual.data(), host_residual.data(), n * sizeof(float)), 0)
              << "residuals differ after step " << step;
        }
      }
    }
  }
}

// The batched apply's word-to-message search, an empty message included.
TEST(CudaElementwise, EachWordFindsItsMessage) {
  const uint64_t ends[] = {3, 3, 7, 10};
  const int expected[] = {0, 0, 0, 2, 2, 2, 2, 3, 3, 3};
  for (uint64_t k = 0; k < 10; ++k) EXPECT_EQ(MessageOfWord(ends, 4, k), expected[k]) << k;
  const uint64_t one[] = {5};
  EXPECT_EQ(MessageOfWord(one, 1, 4), 0);
}

}  // namespace
}  // namespace reckon::cuda
