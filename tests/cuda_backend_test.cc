// The CUDA backend against its CPU twins. Every test skips, printing why,
// where no GPU answers (CI, developer machines); on a GPU they state their
// bounds:
//   - the threshold pass (both compaction methods) and the batched apply are
//     bit-exact with codec::QuantizeResidual and FixedPointReplica::Apply;
//   - a dense-mode training step matches the CPU backend's emitted quanta
//     within a relative error of 1e-4 of the largest (cuBLAS and OpenBLAS
//     sum the GEMMs in different orders; expf/logf differ in the last bit);
//   - a short Fashion-MNIST run reaches the CPU backend's accuracy within
//     1.5 points.
#include "cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/json.h"
#include "base/status_macros.h"
#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "codec/quantizer.h"
#include "codec/update_words.h"
#include "cpu/cpu_backend.h"
#include "cuda/device.h"
#include "cuda/device_codec.h"
#include "cuda/kernels.h"
#include "cuda/merged_apply.h"
#include "cuda/threshold_pass.h"
#include "model/backend.h"
#include "model/model.h"
#include "model/optimizer.h"
#include "tests/gpu_skip.h"
#include "tests/reference_step.h"
#include "tests/step_in_halves.h"
#include "tests/test_process.h"
#include "tests/test_util.h"

namespace reckon::cuda {
namespace {

// Device copies for a test, freed at scope exit.
template <typename T>
struct DeviceArray {
  explicit DeviceArray(const std::vector<T>& host) : n(host.size()) {
    EXPECT_EQ(cudaMalloc(&ptr, std::max<size_t>(n, 1) * sizeof(T)), cudaSuccess);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceArray() { cudaFree(ptr); }
  std::vector<T> Read() const {
    std::vector<T> host(n);
    if (n > 0) {
      EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return host;
  }
  T* ptr = nullptr;
  size_t n;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Where two arrays' bits differ: how many elements, and the first few with
// both values (%a: every bit shows), so that a device run's failure says
// what differs without a second run.
std::string BitDifferences(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) {
    return absl::StrCat("sizes differ: ", actual.size(), " vs ", expected.size());
  }
  size_t count = 0;
  std::string first;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::memcmp(&actual[i], &expected[i], sizeof(float)) == 0) continue;
    if (++count <= 5) {
      char line[160];
      std::snprintf(line, sizeof line, " [%zu] %a (%.9g) vs %a (%.9g);", i, actual[i], actual[i],
                    expected[i], expected[i]);
      first += line;
    }
  }
  return count == 0 ? "bits equal" : absl::StrCat(count, " elements differ:", first);
}

// Bits equal, except that where `expected` is a NaN `actual` need only be a
// NaN: IEEE 754 leaves the payload of an operation's NaN to the machine (the
// GPU's R + 0 returns its canonical 0x7FFFFFFF for 0x7FC00000), and the
// pass's contract is "the residual holds R + delta" in float32 arithmetic.
bool SameBitsOrBothNan(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return false;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (std::isnan(expected[i]) ? !std::isnan(actual[i])
                                : std::memcmp(&actual[i], &expected[i], sizeof(float)) != 0) {
      return false;
    }
  }
  return true;
}

enum class Fill { kRandom, kZero, kAllAbove, kExactlyTau };

std::vector<float> MakeValues(size_t n, float tau, Fill fill, uint64_t seed) {
  std::vector<float> v(n, 0.0f);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f * tau);
  for (size_t i = 0; i < n; ++i) {
    switch (fill) {
      case Fill::kRandom:
        // A mix: small values, values around +-tau, and exactly +-tau.
        v[i] = (i % 97 == 0) ? ((i & 1) ? tau : -tau) : normal(rng);
        break;
      case Fill::kZero:
        break;
      case Fill::kAllAbove:
        v[i] = (i & 1) ? 3.5f * tau : -1.25f * tau;
        break;
      case Fill::kExactlyTau:
        v[i] = (i & 1) ? tau : -tau;
        break;
    }
  }
  return v;
}

// residual += delta; QuantizeResidual: the CPU twin of one device pass.
void CpuPass(std::vector<float>& residual, const std::vector<float>& delta,
             const codec::ThresholdStep& step, std::vector<uint32_t>* words) {
  for (size_t i = 0; i < residual.size(); ++i) residual[i] += delta[i];
  ASSERT_TRUE(codec::QuantizeResidual(residual, step, words).ok());
}

class ThresholdPassTest : public ::testing::TestWithParam<CompactionMethod> {};

TEST_P(ThresholdPassTest, BitExactWithTheCpuQuantizer) {
  SKIP_WITHOUT_GPU();
  const std::vector<size_t> sizes = {0, 1, 31, 32, 33, (size_t{1} << 20) + 7, 14'600'000};
  for (const double threshold : {0.001, 0.01, 0.05}) {
    const absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(threshold, 32);
    ASSERT_TRUE(step.ok());
    for (const size_t n : sizes) {
      for (const Fill fill : {Fill::kRandom, Fill::kZero, Fill::kAllAbove, Fill::kExactlyTau}) {
        SCOPED_TRACE(::testing::Message()
                     << "tau " << step->tau << " n " << n << " fill " << int(fill));
        std::vector<float> residual = MakeValues(n, step->tau, fill, n + 1);
        // Random deltas with random residuals; none where the fill is the
        // point (exactly +-tau, all above, all zero).
        const std::vector<float> delta = fill == Fill::kRandom
                                             ? MakeValues(n, step->tau / 3, Fill::kRandom, n + 2)
                                             : std::vector<float>(n, 0.0f);
        DeviceArray<float> d_residual(residual), d_delta(delta);
        absl::StatusOr<std::unique_ptr<ThresholdPass>> pass =
            ThresholdPass::Create(n, GetParam(), nullptr);
        ASSERT_TRUE(pass.ok()) << pass.status();
        ASSERT_TRUE((*pass)->Launch(d_delta.ptr, d_residual.ptr, n, step->tau).ok());
        std::vector<uint32_t> gpu_words;
        ASSERT_TRUE((*pass)->Finish(&gpu_words).ok());
        std::vector<uint32_t> cpu_words;
        CpuPass(residual, delta, *step, &cpu_words);
        EXPECT_EQ(gpu_words, cpu_words);
        EXPECT_TRUE(SameBits(d_residual.Read(), residual)) << "residuals differ";
        if (fill == Fill::kAllAbove) {
          EXPECT_EQ(gpu_words.size(), n);
        }
        if (fill == Fill::kZero) {
          EXPECT_TRUE(gpu_words.empty());
        }
      }
    }
  }
}

TEST_P(ThresholdPassTest, NanOrInfEmitsNothingAndKeepsTheResidual) {
  SKIP_WITHOUT_GPU();
  const absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.01, 32);
  const size_t n = 100'003;
  for (const float bad : {std::nanf(""), INFINITY, -INFINITY}) {
    std::vector<float> residual = MakeValues(n, step->tau, Fill::kAllAbove, 7);
    std::vector<float> delta(n, 0.0f);
    residual[77'777] = bad;
    residual[90'000] = bad;
    DeviceArray<float> d_residual(residual), d_delta(delta);
    absl::StatusOr<std::unique_ptr<ThresholdPass>> pass =
        ThresholdPass::Create(n, GetParam(), nullptr);
    ASSERT_TRUE(pass.ok());
    ASSERT_TRUE((*pass)->Launch(d_delta.ptr, d_residual.ptr, n, step->tau).ok());
    std::vector<uint32_t> words = {1, 2, 3};
    const absl::Status s = (*pass)->Finish(&words);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("residual element 77777"), std::string_view::npos) << s;
    EXPECT_TRUE(words.empty());
    EXPECT_TRUE(SameBitsOrBothNan(d_residual.Read(), residual)) << "the residual changed";
  }
}

// The fused pass (optimizer + residual + threshold in one kernel) against
// the CPU's model::AccumulateDelta then codec::QuantizeResidual: the words,
// the residual and the optimizer's state, bit for bit, for every rule.
TEST_P(ThresholdPassTest, TheFusedOptimizerPassIsBitExactWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.01, 32);
  ASSERT_TRUE(step.ok());
  const float lr = 0.05f;
  for (const model::OptimizerKind kind :
       {model::OptimizerKind::kSgd, model::OptimizerKind::kMomentum,
        model::OptimizerKind::kAdagrad}) {
    for (const double weight_decay : {0.0, 1e-3}) {
      for (const size_t n : {size_t{1}, size_t{33}, (size_t{1} << 20) + 7}) {
        SCOPED_TRACE(::testing::Message()
                     << model::OptimizerName(kind) << " wd " << weight_decay << " n " << n);
        model::OptimizerConfig config;
        config.kind = kind;
        config.momentum = 0.9;
        config.weight_decay = weight_decay;
        std::vector<float> residual = MakeValues(n, step->tau, Fill::kRandom, n + 11);
        const std::vector<float> grad = MakeValues(n, step->tau * 4, Fill::kRandom, n + 12);
        const std::vector<float> weights = MakeValues(n, 1.0f, Fill::kRandom, n + 13);
        std::vector<float> state = MakeValues(n, step->tau, Fill::kRandom, n + 14);
        if (kind == model::OptimizerKind::kAdagrad) {
          for (float& h : state) h = std::fabs(h);
        }
        DeviceArray<float> d_residual(residual), d_grad(grad), d_weights(weights), d_state(state);
        absl::StatusOr<std::unique_ptr<ThresholdPass>> pass =
            ThresholdPass::Create(n, GetParam(), nullptr);
        ASSERT_TRUE(pass.ok()) << pass.status();
        OptimizerRule rule;
        rule.kind = static_cast<int>(kind == model::OptimizerKind::kSgd        ? 0
                                     : kind == model::OptimizerKind::kMomentum ? 1
                                                                               : 2);
        rule.lr = lr;
        rule.momentum = static_cast<float>(config.momentum);
        rule.eps = static_cast<float>(config.adagrad_eps);
        rule.weight_decay = static_cast<float>(weight_decay);
        const absl::Status launched = (*pass)->LaunchFused(
            rule, d_grad.ptr, d_state.ptr, d_weights.ptr, d_residual.ptr, n, step->tau);
        if (GetParam() == CompactionMethod::kCubSelect) {
          EXPECT_EQ(launched.code(), absl::StatusCode::kFailedPrecondition) << launched;
          return;
        }
        ASSERT_TRUE(launched.ok()) << launched;
        std::vector<uint32_t> gpu_words;
        ASSERT_TRUE((*pass)->Finish(&gpu_words).ok());

        model::AccumulateDelta(config, lr, grad, weights, state, residual, {});
        std::vector<uint32_t> cpu_words;
        ASSERT_TRUE(codec::QuantizeResidual(residual, *step, &cpu_words).ok());
        EXPECT_EQ(gpu_words, cpu_words);
        if (n > 1000) {
          EXPECT_FALSE(cpu_words.empty()) << "a test that emits nothing shows little";
        }
        EXPECT_TRUE(SameBits(d_residual.Read(), residual)) << "residuals differ";
        if (kind != model::OptimizerKind::kSgd) {
          EXPECT_TRUE(SameBits(d_state.Read(), state)) << "optimizer states differ";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Methods, ThresholdPassTest,
                         ::testing::Values(CompactionMethod::kCubSelect,
                                           CompactionMethod::kSinglePass),
                         [](const auto& info) {
                           return info.param == CompactionMethod::kCubSelect ? "CubSelect"
                                                                             : "SinglePass";
                         });

model::BackendConfig SmallConfig(model::UpdateMode mode) {
  model::BackendConfig config;
  config.shape = *model::ModelShape::Parse("784,64,10", "relu");
  config.optimizer.kind = model::OptimizerKind::kMomentum;
  config.mode = mode;
  config.step = *codec::MakeThresholdStep(0.01, 32);
  config.max_batch = 100;
  config.threads = 1;
  return config;
}

// Two CUDA backends of `config` holding the same initial model (`seed`).
absl::StatusOr<std::pair<std::unique_ptr<model::Backend>, std::unique_ptr<model::Backend>>>
TwinBackends(const model::BackendConfig& config, uint64_t seed) {
  RECKON_ASSIGN_OR_RETURN(
      codec::FixedPointReplica init,
      codec::FixedPointReplica::Create(config.shape.param_count(), config.fraction_bits));
  RECKON_RETURN_IF_ERROR(model::InitializeModel(config.shape, seed, &init));
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> a, MakeCudaBackend(config));
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> b, MakeCudaBackend(config));
  RECKON_RETURN_IF_ERROR(a->LoadWeights(init.quanta()));
  RECKON_RETURN_IF_ERROR(b->LoadWeights(init.quanta()));
  return std::make_pair(std::move(a), std::move(b));
}

// Onebit and dyntree8 encoded by the device's kernels (cuda/device_codec.h)
// against codec::EncodeWithFeedback with the host codec, over several steps
// of a layout whose tensors span many blocks and columns: the same message
// bytes, quanta and residual each step, and a NaN refused alike (the
// residual holding R + delta, nothing emitted, the next step as if the
// refused one had not been).
TEST(DeviceCodec, OnebitAndDyntree8EncodeBitForBitAsTheHostCodecs) {
  SKIP_WITHOUT_GPU();
  const codec::TensorLayout layout = {{300, 784}, {300, 1},  {100, 300},
                                      {100, 1},   {10, 100}, {10, 1}};
  const size_t n = codec::LayoutParamCount(layout);
  for (const v1::Codec id : {v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8}) {
    for (const bool error_feedback : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << codec::CodecFlagName(id) << " feedback " << error_feedback);
      codec::CodecOptions options;
      options.codec = id;
      options.layout = layout;
      options.fraction_bits = 32;
      options.error_feedback = error_feedback;
      options.absmax_every = 2;
      absl::StatusOr<std::unique_ptr<codec::Codec>> host = codec::MakeCodec(options);
      absl::StatusOr<std::unique_ptr<DeviceCodec>> device = MakeDeviceCodec(options, nullptr);
      ASSERT_TRUE(host.ok() && device.ok()) << device.status();
      std::vector<float> host_residual(n, 0.0f);
      DeviceArray<float> residual(host_residual);
      for (int step = 0; step < 6; ++step) {
        std::vector<float> delta = MakeValues(n, 1e-3f * float(step + 1), Fill::kRandom, 40 + step);
        const bool refuse = step == 3;
        if (refuse) delta[n / 2 + 5] = std::nanf("");
        DeviceArray<float> d_delta(delta);
        for (size_t i = 0; i < n; ++i) host_residual[i] += delta[i];
        v1::Update host_msg, device_msg;
        std::vector<int64_t> host_quanta, device_quanta;
        const absl::Status h =
            codec::EncodeWithFeedback(**host, options, host_residual, &host_msg, &host_quanta);
        const absl::Status d =
            (*device)->Encode(d_delta.ptr, residual.ptr, n, &device_msg, &device_quanta);
        ASSERT_EQ(d.ok(), h.ok()) << "step " << step << ": " << d << " / " << h;
        if (refuse) {
          // The same words (the NaN's payload bits are the machine's).
          const std::string named = absl::StrCat("residual element ", n / 2 + 5, " is ");
          EXPECT_EQ(d.message().rfind(named, 0), 0u) << d;
          EXPECT_EQ(h.message().rfind(named, 0), 0u) << h;
          EXPECT_TRUE(device_quanta.empty());
          EXPECT_TRUE(SameBitsOrBothNan(residual.Read(), host_residual));
          host_residual[n / 2 + 5] = 0.0f;
          ASSERT_EQ(cudaMemcpy(residual.ptr + n / 2 + 5, &host_residual[n / 2 + 5], sizeof(float),
                               cudaMemcpyHostToDevice),
                    cudaSuccess);
          continue;
        }
        EXPECT_TRUE(device_msg.payload() == host_msg.payload()) << "step " << step;
        EXPECT_EQ(device_msg.crc32c(), host_msg.crc32c());
        EXPECT_EQ(device_quanta, host_quanta) << "step " << step;
        EXPECT_TRUE(SameBits(residual.Read(), host_residual)) << "step " << step;
      }
      // The state a checkpoint keeps is the host codec's, and taken up
      // by a fresh device codec it continues the same messages.
      const absl::StatusOr<codec::CodecState> state = (*device)->State();
      ASSERT_TRUE(state.ok()) << state.status();
      EXPECT_EQ(*state, (*host)->State());
      absl::StatusOr<std::unique_ptr<DeviceCodec>> resumed = MakeDeviceCodec(options, nullptr);
      ASSERT_TRUE(resumed.ok() && (*resumed)->Restore(*state).ok());
      const std::vector<float> delta = MakeValues(n, 2e-3f, Fill::kRandom, 99);
      DeviceArray<float> d_delta(delta);
      DeviceArray<float> residual_copy(residual.Read());
      v1::Update a, b;
      std::vector<int64_t> qa, qb;
      ASSERT_TRUE((*device)->Encode(d_delta.ptr, residual.ptr, n, &a, &qa).ok());
      ASSERT_TRUE((*resumed)->Encode(d_delta.ptr, residual_copy.ptr, n, &b, &qb).ok());
      EXPECT_TRUE(a.payload() == b.payload());
    }
  }
}

// The peers' apply runs while the caller goes on (ApplyUpdateBatch returns
// once it is enqueued): batches back to back reuse the staging buffers only
// after the device has read them, a step enqueued next sees every one
// applied, and the wraps are counted once the device has finished.
TEST(CudaBackend, ThePeersApplyRunsOnWhileTheCallerGoesOn) {
  SKIP_WITHOUT_GPU();
  const model::BackendConfig config = SmallConfig(model::UpdateMode::kThreshold);
  const uint64_t n = config.shape.param_count();
  absl::StatusOr<codec::FixedPointReplica> cpu = codec::FixedPointReplica::Create(n, 32);
  ASSERT_TRUE(model::InitializeModel(config.shape, 1, &*cpu).ok());
  std::vector<int64_t> start(cpu->quanta().begin(), cpu->quanta().end());
  start[3] = std::numeric_limits<int64_t>::max() - 10;  // wraps once below
  ASSERT_TRUE(cpu->Load(start).ok());
  absl::StatusOr<std::unique_ptr<model::Backend>> gpu = MakeCudaBackend(config);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->LoadWeights(start).ok());
  const std::vector<uint32_t> up = {3};
  for (int batch = 0; batch < 20; ++batch) {
    std::vector<std::vector<uint32_t>> sets;
    std::vector<model::UpdateRef> refs;
    for (int m = 0; m < 8; ++m) {
      sets.push_back(::reckon::testing::RandomUpdates(3000 + 11 * m, n, 1000 * batch + m, false));
    }
    for (int m = 0; m < 8; ++m) {
      refs.push_back({int64_t{1} << 20, sets[m], {}});
      ASSERT_TRUE(cpu->Apply(int64_t{1} << 20, sets[m]).ok());
    }
    if (batch == 10) {
      refs.push_back({100, up, {}});
      ASSERT_TRUE(cpu->Apply(100, up).ok());
    }
    ASSERT_TRUE((*gpu)->ApplyUpdateBatch(refs).ok());  // no wait between batches
  }
  // A step enqueued behind the applies reads the applied weights: its
  // evaluation equals one of a backend loaded with the host's result.
  std::vector<float> images;
  std::vector<int32_t> labels;
  ::reckon::testing::SyntheticBatch(64, 784, &images, &labels);
  const model::BatchStats behind = (*gpu)->Evaluate(images.data(), labels.data(), 64).value();
  absl::StatusOr<std::unique_ptr<model::Backend>> loaded = MakeCudaBackend(config);
  ASSERT_TRUE(loaded.ok());
  ASSERT_TRUE((*loaded)->LoadWeights(cpu->quanta()).ok());
  const model::BatchStats direct = (*loaded)->Evaluate(images.data(), labels.data(), 64).value();
  EXPECT_EQ(behind.loss_sum, direct.loss_sum);
  EXPECT_EQ(behind.correct, direct.correct);
  const std::vector<int64_t> q = (*gpu)->ReadWeights().value();
  EXPECT_TRUE(std::equal(q.begin(), q.end(), cpu->quanta().begin()));
  // Counted once finished (how many depends on the order the atomics met
  // parameter 3 in, as on the CPU: at least the one the step of 100 made).
  EXPECT_GE(cpu->wrapped(), 1u);
  EXPECT_GE((*gpu)->WeightsWrapped(), 1u);
}

// The peers' batch is applied beside the next step's compute (issue 37
// item 4): that step computes on the floats from before the batch (its
// emission is a step's that never saw it), the quanta hold the batch at
// once, and the step after sees it, as a backend that applied the same
// messages one at a time (ApplyUpdates: seen by the next step) before it.
// The replicas end equal.
TEST(CudaBackend, ThePeersBatchRunsBesideTheNextStepAndTheOneAfterSeesIt) {
  SKIP_WITHOUT_GPU();
  model::BackendConfig config = SmallConfig(model::UpdateMode::kThreshold);
  config.step = *codec::MakeThresholdStep(0.002, config.fraction_bits);
  const uint64_t n = config.shape.param_count();
  auto twins = TwinBackends(config, 8);
  ASSERT_TRUE(twins.ok()) << twins.status();
  std::unique_ptr<model::Backend>* const beside = &twins->first;
  std::unique_ptr<model::Backend>* const strict = &twins->second;
  std::vector<float> images;
  std::vector<int32_t> labels;
  ::reckon::testing::SyntheticBatch(100, 784, &images, &labels);
  const int64_t step = config.step.step_quanta;
  std::vector<std::vector<uint32_t>> peers;
  std::vector<model::UpdateRef> refs;
  for (int m = 0; m < 8; ++m) {
    peers.push_back(::reckon::testing::RandomUpdates(20000 + 7 * m, n, 300 + m, m % 2 == 0));
  }
  for (const auto& words : peers) refs.push_back({step * 64, words, {}});
  for (int round = 0; round < 3; ++round) {
    // `beside`: the peers' batch, then a step; `strict`: the step, then the
    // same messages one at a time. The same emission: the step did not see
    // the batch.
    ASSERT_TRUE((*beside)->ApplyUpdateBatch(refs).ok());
    model::Emission a, b;
    ASSERT_TRUE((*beside)->TrainStep(images.data(), labels.data(), 100, 0.05f, &a).ok());
    ASSERT_TRUE((*strict)->TrainStep(images.data(), labels.data(), 100, 0.05f, &b).ok());
    ASSERT_FALSE(a.words.empty());
    EXPECT_EQ(a.words, b.words) << "round " << round << ": the step saw the batch beside it";
    for (const auto& words : peers) ASSERT_TRUE((*strict)->ApplyUpdates(step * 64, words).ok());
    // The quanta hold the batch already.
    EXPECT_EQ(*(*beside)->ReadWeights(), *(*strict)->ReadWeights()) << "round " << round;
    ASSERT_TRUE((*beside)->ApplyOwnEmission(step, a.words).ok());
    ASSERT_TRUE((*strict)->ApplyOwnEmission(step, b.words).ok());
    // The next step (round + 1's) sees it: checked by the emissions equal
    // there, the batch having changed both replicas' floats alike.
  }
  model::Emission a, b;
  ASSERT_TRUE((*beside)->TrainStep(images.data(), labels.data(), 100, 0.05f, &a).ok());
  ASSERT_TRUE((*strict)->TrainStep(images.data(), labels.data(), 100, 0.05f, &b).ok());
  EXPECT_EQ(a.words, b.words);
  // And it mattered: a backend that never applied the peers steps elsewhere.
  auto more = TwinBackends(config, 8);
  ASSERT_TRUE(more.ok()) << more.status();
  std::unique_ptr<model::Backend>* const without = &more->first;
  model::Emission c;
  for (int round = 0; round < 3; ++round) {
    ASSERT_TRUE((*without)->TrainStep(images.data(), labels.data(), 100, 0.05f, &c).ok());
    ASSERT_TRUE((*without)->ApplyOwnEmission(step, c.words).ok());
  }
  ASSERT_TRUE((*without)->TrainStep(images.data(), labels.data(), 100, 0.05f, &c).ok());
  EXPECT_NE(c.words, b.words) << "the peers' messages changed nothing the steps computed";
  EXPECT_EQ(*(*beside)->WeightHash(), *(*strict)->WeightHash());
}

// The merged apply (cuda/merged_apply.h) leaves the replica the host's
// FixedPointReplica::Apply leaves, message by message, floats included:
// many messages touching the same parameters, both signs, a sum past the
// int64 range (modulo 2^64, counted), and a second, larger batch (the
// scratch grows).
TEST(MergedApply, LeavesTheReplicaTheHostApplyLeaves) {
  SKIP_WITHOUT_GPU();
  const uint64_t n = 200'003;
  absl::StatusOr<codec::FixedPointReplica> cpu = codec::FixedPointReplica::Create(n, 32);
  ASSERT_TRUE(cpu.ok());
  std::vector<int64_t> start(n);
  std::mt19937_64 rng(5);
  for (int64_t& q : start) q = static_cast<int64_t>(rng() >> 20) - (int64_t{1} << 43);
  start[7] = std::numeric_limits<int64_t>::max() - 5;
  ASSERT_TRUE(cpu->Load(start).ok());
  DeviceArray<int64_t> quanta(start);
  DeviceArray<float> weights(std::vector<float>(n, 0.0f));
  DeviceArray<unsigned long long> wrapped(std::vector<unsigned long long>(1, 0));
  MergedApply merged;
  for (const int messages : {30, 90}) {
    std::vector<uint32_t> words;
    std::vector<uint64_t> ends;
    std::vector<int64_t> steps;
    for (int m = 0; m < messages; ++m) {
      std::vector<uint32_t> set =
          ::reckon::testing::RandomUpdates(2000 + 101 * m, n, 70 + m, m % 3 == 1);
      if (m == 0) {  // +step at 7: past INT64_MAX
        std::erase_if(set, [](uint32_t w) { return (w & 0x7FFFFFFFu) == 7; });
        set.insert(std::lower_bound(set.begin(), set.end(), 7u,
                                    [](uint32_t w, uint32_t i) { return (w & 0x7FFFFFFFu) < i; }),
                   7u);
      }
      const int64_t step = int64_t{1} << (18 + m % 6);
      ASSERT_TRUE(cpu->Apply(step, set).ok()) << m;
      words.insert(words.end(), set.begin(), set.end());
      ends.push_back(words.size());
      steps.push_back(step);
    }
    DeviceArray<uint32_t> d_words(words);
    DeviceArray<uint64_t> d_ends(ends);
    DeviceArray<int64_t> d_steps(steps);
    ASSERT_TRUE(merged
                    .Launch(d_words.ptr, words.size(), d_ends.ptr, d_steps.ptr, messages,
                            quanta.ptr, weights.ptr, std::ldexp(1.0, -32), wrapped.ptr, nullptr)
                    .ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<int64_t> q = quanta.Read();
    EXPECT_TRUE(std::equal(q.begin(), q.end(), cpu->quanta().begin())) << messages;
    // Every touched float is its quanta's value (untouched ones stay 0).
    const std::vector<float> w = weights.Read();
    for (const uint32_t word : words) {
      const uint32_t i = word & 0x7FFFFFFFu;
      ASSERT_EQ(w[i], static_cast<float>(static_cast<double>(q[i]) * std::ldexp(1.0, -32))) << i;
    }
  }
  EXPECT_GE(cpu->wrapped(), 1u);
  EXPECT_GE(wrapped.Read()[0], 1u);
}

TEST(CudaBackend, BatchedApplyIsBitExactWithTheCpuReplica) {
  SKIP_WITHOUT_GPU();
  const model::BackendConfig config = SmallConfig(model::UpdateMode::kThreshold);
  const uint64_t n = config.shape.param_count();
  absl::StatusOr<codec::FixedPointReplica> cpu = codec::FixedPointReplica::Create(n, 32);
  ASSERT_TRUE(model::InitializeModel(config.shape, 1, &*cpu).ok());
  absl::StatusOr<std::unique_ptr<model::Backend>> gpu = MakeCudaBackend(config);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->LoadWeights(cpu->quanta()).ok());
  // 50 messages from "many peers", overlapping indices, different steps.
  std::vector<std::vector<uint32_t>> sets;
  std::vector<model::UpdateRef> refs;
  for (int m = 0; m < 50; ++m) {
    sets.push_back(::reckon::testing::RandomUpdates(500 + 37 * m, n, 100 + m, m % 7 == 0));
  }
  for (int m = 0; m < 50; ++m) {
    const int64_t step = int64_t{1} << (20 + m % 5);
    refs.push_back({step, sets[m], {}});
    ASSERT_TRUE(cpu->Apply(step, sets[m]).ok());
  }
  ASSERT_TRUE((*gpu)->ApplyUpdateBatch(refs).ok());
  EXPECT_EQ((*gpu)->WeightHash().value(), cpu->WeightHash());
  const std::vector<int64_t> q = (*gpu)->ReadWeights().value();
  EXPECT_TRUE(std::equal(q.begin(), q.end(), cpu->quanta().begin()));

  // A word past the end: refused, nothing applied.
  std::vector<uint32_t> bad = {0, 5, uint32_t(n)};
  const std::string before = (*gpu)->WeightHash().value();
  const model::UpdateRef both[] = {{1 << 20, sets[0], {}}, {1 << 20, bad, {}}};
  EXPECT_EQ((*gpu)->ApplyUpdateBatch(both).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*gpu)->WeightHash().value(), before);

  // A sum past the int64 range wraps, modulo 2^64, as on the CPU replica.
  std::vector<int64_t> near_max(n, 0);
  near_max[3] = std::numeric_limits<int64_t>::max() - 10;
  ASSERT_TRUE((*gpu)->LoadWeights(near_max).ok());
  ASSERT_TRUE(cpu->Load(near_max).ok());
  const std::vector<uint32_t> up = {1, 3, 9};
  const model::UpdateRef past_the_range[] = {{100, up, {}}, {100, up, {}}, {1 << 20, sets[1], {}}};
  ASSERT_TRUE((*gpu)->ApplyUpdateBatch(past_the_range).ok());
  const uint64_t wrapped_before = cpu->wrapped();
  ASSERT_TRUE(cpu->Apply(100, up).ok());
  ASSERT_TRUE(cpu->Apply(100, up).ok());  // parameter 3 passes INT64_MAX
  ASSERT_TRUE(cpu->Apply(1 << 20, sets[1]).ok());
  EXPECT_GE(cpu->wrapped(), wrapped_before + 1);
  EXPECT_EQ((*gpu)->ReadWeights().value(),
            std::vector<int64_t>(cpu->quanta().begin(), cpu->quanta().end()));
}

// The bias gradient (LaunchBiasGradient) adds each column's rows in order,
// r = 0, 1, ..., as the CPU backend's loop does (cpu/mlp_math.cc): bit for
// bit at Strom's width and batch, at a batch that is no multiple of the
// rows the kernel loads ahead, one row, and no rows. The values span
// several magnitudes, so that the order shows: the same sums taken from the
// last row up differ (checked here, so the test can tell).
TEST(CudaKernels, TheBiasGradientAddsEachColumnsRowsInOrder) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int rows, cols;
  };
  for (const Shape shape :
       {Shape{1024, 1800}, Shape{100, 10}, Shape{37, 33}, Shape{1, 5}, Shape{0, 7}}) {
    SCOPED_TRACE(::testing::Message() << shape.rows << " x " << shape.cols);
    std::mt19937_64 rng(uint64_t(shape.rows) * 7919 + shape.cols);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> exponent(-12, 6);
    std::vector<float> d(size_t(shape.rows) * shape.cols);
    for (float& x : d) x = std::ldexp(normal(rng), exponent(rng));
    std::vector<float> in_order(shape.cols, 0.0f), backwards(shape.cols, 0.0f);
    for (int r = 0; r < shape.rows; ++r) {
      for (int c = 0; c < shape.cols; ++c) in_order[c] += d[size_t(r) * shape.cols + c];
    }
    for (int r = shape.rows; r-- > 0;) {
      for (int c = 0; c < shape.cols; ++c) backwards[c] += d[size_t(r) * shape.cols + c];
    }
    if (shape.rows >= 100) {
      EXPECT_FALSE(SameBits(in_order, backwards));
    }
    DeviceArray<float> device_d(d), device_db(std::vector<float>(shape.cols, -1.0f));
    ASSERT_TRUE(
        LaunchBiasGradient(device_d.ptr, shape.rows, shape.cols, device_db.ptr, nullptr).ok());
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> got = device_db.Read();
    EXPECT_TRUE(SameBits(got, in_order)) << BitDifferences(got, in_order);
  }
}

TEST(CudaBackend, DenseStepMatchesTheCpuBackend) {
  SKIP_WITHOUT_GPU();
  for (const auto kind : {model::OptimizerKind::kSgd, model::OptimizerKind::kMomentum,
                          model::OptimizerKind::kAdagrad}) {
    model::BackendConfig config = SmallConfig(model::UpdateMode::kCodec);
    config.optimizer.kind = kind;
    config.optimizer.weight_decay = 1e-4;
    const uint64_t n = config.shape.param_count();
    absl::StatusOr<codec::FixedPointReplica> init = codec::FixedPointReplica::Create(n, 32);
    ASSERT_TRUE(model::InitializeModel(config.shape, 3, &*init).ok());
    absl::StatusOr<std::unique_ptr<model::Backend>> cpu = cpu::MakeCpuBackend(config);
    absl::StatusOr<std::unique_ptr<model::Backend>> gpu = MakeCudaBackend(config);
    ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
    ASSERT_TRUE((*cpu)->LoadWeights(init->quanta()).ok());
    ASSERT_TRUE((*gpu)->LoadWeights(init->quanta()).ok());
    std::vector<float> images;
    std::vector<int32_t> labels;
    ::reckon::testing::SyntheticBatch(100, 784, &images, &labels);
    // The yardstick is the exact step (tests/reference_step.h), norm-wise:
    // on the H100 an element-wise bound relative to the largest element
    // failed (parameter 1500 of step 1, SGD: the two float32 GEMM orders
    // differed by 24,736 quanta against a bound of 21,475).
    ::reckon::testing::ReferenceStep reference(config, init->quanta());
    for (int step = 0; step < 3; ++step) {
      model::Emission a, b;
      absl::StatusOr<model::BatchStats> sa =
          (*cpu)->TrainStep(images.data(), labels.data(), 100, 0.05f, &a);
      absl::StatusOr<model::BatchStats> sb =
          (*gpu)->TrainStep(images.data(), labels.data(), 100, 0.05f, &b);
      ASSERT_TRUE(sa.ok() && sb.ok()) << sb.status();
      EXPECT_NEAR(sb->loss_sum, sa->loss_sum, 1e-4 * std::abs(sa->loss_sum));
      ASSERT_EQ(a.quanta().size(), b.quanta().size());
      const std::vector<double> exact = reference.Step(images.data(), labels.data(), 100, 0.05f);
      const double cpu_error = ::reckon::testing::RelativeError(a.quanta().ToVector(), exact);
      const double gpu_error = ::reckon::testing::RelativeError(b.quanta().ToVector(), exact);
      std::printf("FIGURES %s step %d: ||emitted - float64|| / ||float64||: cpu %.2e, gpu %.2e\n",
                  model::OptimizerName(kind).c_str(), step, cpu_error, gpu_error);
      EXPECT_LT(cpu_error, 1e-3) << "step " << step;
      EXPECT_LT(gpu_error, 1e-3) << "step " << step;
      // All apply the CPU's emission, so the replicas stay equal and the
      // next step compares the ops again from the same weights (each
      // backend keeps its own sub-quantum rounding remainder).
      ASSERT_TRUE((*cpu)->ApplyDense(a.quanta()).ok());
      ASSERT_TRUE((*gpu)->ApplyDense(a.quanta()).ok());
      reference.Apply(a.quanta().ToVector());
      EXPECT_EQ((*gpu)->WeightHash().value(), (*cpu)->WeightHash().value());
    }
    const model::BatchStats ea = (*cpu)->Evaluate(images.data(), labels.data(), 100).value();
    const model::BatchStats eb = (*gpu)->Evaluate(images.data(), labels.data(), 100).value();
    EXPECT_NEAR(eb.loss_sum, ea.loss_sum, 1e-4 * std::abs(ea.loss_sum));
    EXPECT_NEAR(eb.correct, ea.correct, 1);
  }
}

// -1 when the summary is missing or has no accuracy.
double TestAccuracy(const std::string& summary_path) {
  absl::StatusOr<base::Json> json = base::ReadJsonFile(summary_path);
  if (!json.ok()) return -1;
  absl::StatusOr<double> accuracy = base::JsonNumber(*json, "test_accuracy", summary_path);
  return accuracy.ok() ? *accuracy : -1;
}

// The worker and the data this test runs: where the build put them, or
// where the device run's pack does (tests/gpu/run.sh sets both: the pack
// runs on a machine without this checkout's build folder or Debian's
// dataset package).
std::string WorkerPath() {
  const char* from_env = std::getenv("RECKON_WORKER");
  return from_env != nullptr && *from_env != '\0' ? from_env : RECKON_WORKER_PATH;
}

std::string DataDir() {
  const char* from_env = std::getenv("RECKON_DATA_DIR");
  return from_env != nullptr && *from_env != '\0' ? from_env : "/usr/share/datasets/fashion-mnist";
}

// Pre-training's step on the device (the dense codec's quantization, error
// feedback and apply without the residual leaving the GPU) against the
// same backend's TrainStep + ApplyDense: weights, residual and optimizer
// state bit for bit, and the same refusal of a NaN.
TEST(CudaBackend, TrainStepLocallyIsBitExactWithTrainStepThenApplyDense) {
  SKIP_WITHOUT_GPU();
  for (const auto kind : {model::OptimizerKind::kSgd, model::OptimizerKind::kMomentum}) {
    model::BackendConfig config = SmallConfig(model::UpdateMode::kCodec);
    config.optimizer.kind = kind;
    config.codec.codec = v1::CODEC_DENSE_FP32;
    config.codec.error_feedback = true;
    const uint64_t n = config.shape.param_count();
    absl::StatusOr<codec::FixedPointReplica> init = codec::FixedPointReplica::Create(n, 32);
    ASSERT_TRUE(model::InitializeModel(config.shape, 5, &*init).ok());
    absl::StatusOr<std::unique_ptr<model::Backend>> host = MakeCudaBackend(config);
    absl::StatusOr<std::unique_ptr<model::Backend>> local = MakeCudaBackend(config);
    ASSERT_TRUE(host.ok() && local.ok()) << local.status();
    ASSERT_TRUE((*host)->LoadWeights(init->quanta()).ok());
    ASSERT_TRUE((*local)->LoadWeights(init->quanta()).ok());
    std::vector<float> images;
    std::vector<int32_t> labels;
    ::reckon::testing::SyntheticBatch(100, 784, &images, &labels);
    for (int step = 0; step < 4; ++step) {
      model::Emission a, b;
      absl::StatusOr<model::BatchStats> sa =
          (*host)->TrainStep(images.data(), labels.data(), 100, 0.05f, &a);
      ASSERT_TRUE(sa.ok()) << sa.status();
      ASSERT_TRUE((*host)->ApplyDense(a.quanta()).ok());
      absl::StatusOr<model::BatchStats> sb =
          (*local)->TrainStepLocally(images.data(), labels.data(), 100, 0.05f, &b);
      ASSERT_TRUE(sb.ok()) << sb.status();
      EXPECT_EQ(sa->loss_sum, sb->loss_sum);
      EXPECT_EQ(sa->correct, sb->correct);
      EXPECT_EQ(*(*host)->ReadWeights(), *(*local)->ReadWeights()) << "step " << step;
      EXPECT_TRUE(SameBits(*(*host)->ReadResidual(), *(*local)->ReadResidual())) << step;
      EXPECT_TRUE(SameBits(*(*host)->ReadOptimizerState(), *(*local)->ReadOptimizerState()));
    }
    // A NaN in the batch: refused, naming the element, the replica as it was.
    const std::vector<int64_t> before = *(*local)->ReadWeights();
    images[3] = std::nanf("");
    model::Emission c;
    const absl::StatusOr<model::BatchStats> refused =
        (*local)->TrainStepLocally(images.data(), labels.data(), 100, 0.05f, &c);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find("residual element"), std::string_view::npos);
    EXPECT_EQ(*(*local)->ReadWeights(), before);
  }
}

// The step in halves on the device (issue 37 item 4: the next batch is
// copied on the copy stream into the other input while a step computes)
// is TrainStep, bit for bit: stats, words or dense quanta, replica, in
// threshold mode (the fused pass; AdaGrad on the aggregate, whose record
// of the own step is taken at the finish) and the codec modes (dense on
// the host, onebit on the device), and its refusals (a bad label at
// StageBatch).
TEST(CudaBackend, TheStepInHalvesIsTrainStep) {
  SKIP_WITHOUT_GPU();
  struct Case {
    const char* name;
    model::UpdateMode mode;
    model::OptimizerKind optimizer;
    v1::Codec codec;
  };
  for (const Case& c :
       {Case{"threshold, momentum", model::UpdateMode::kThreshold, model::OptimizerKind::kMomentum,
             v1::CODEC_DENSE_FP32},
        Case{"threshold, aggregate adagrad", model::UpdateMode::kThreshold,
             model::OptimizerKind::kAdagrad, v1::CODEC_DENSE_FP32},
        Case{"dense fp32", model::UpdateMode::kCodec, model::OptimizerKind::kMomentum,
             v1::CODEC_DENSE_FP32},
        Case{"onebit", model::UpdateMode::kCodec, model::OptimizerKind::kSgd, v1::CODEC_ONEBIT}}) {
    SCOPED_TRACE(c.name);
    model::BackendConfig config = SmallConfig(c.mode);
    config.optimizer.kind = c.optimizer;
    config.optimizer.adagrad_placement = model::AdagradPlacement::kAggregate;
    config.step = *codec::MakeThresholdStep(0.002, config.fraction_bits);
    config.codec.codec = c.codec;
    config.codec.error_feedback = true;
    absl::StatusOr<codec::FixedPointReplica> init =
        codec::FixedPointReplica::Create(config.shape.param_count(), config.fraction_bits);
    ASSERT_TRUE(model::InitializeModel(config.shape, 7, &*init).ok());
    ::reckon::testing::ExpectTheStepInHalvesIsTrainStep(
        [&]() -> absl::StatusOr<std::unique_ptr<model::Backend>> {
          absl::StatusOr<std::unique_ptr<model::Backend>> b = MakeCudaBackend(config);
          if (b.ok()) RECKON_RETURN_IF_ERROR((*b)->LoadWeights(init->quanta()));
          return b;
        },
        /*steps=*/6, /*batch=*/100, 784, config.step.step_quanta);
  }
}

// A worker's own emission applied from the device (where the pass left its
// words) against uploading the same words: the same replica; words that
// are not the last step's are refused, not confused with them.
TEST(CudaBackend, TheOwnEmissionAppliedFromTheDeviceIsTheUploadedOne) {
  SKIP_WITHOUT_GPU();
  model::BackendConfig config = SmallConfig(model::UpdateMode::kThreshold);
  config.step = *codec::MakeThresholdStep(0.001, 32);
  auto twins = TwinBackends(config, 6);
  ASSERT_TRUE(twins.ok()) << twins.status();
  std::unique_ptr<model::Backend>* const uploaded = &twins->first;
  std::unique_ptr<model::Backend>* const own = &twins->second;
  std::vector<float> images;
  std::vector<int32_t> labels;
  ::reckon::testing::SyntheticBatch(100, 784, &images, &labels);
  for (int step = 0; step < 3; ++step) {
    model::Emission a, b;
    ASSERT_TRUE((*uploaded)->TrainStep(images.data(), labels.data(), 100, 0.05f, &a).ok());
    ASSERT_TRUE((*own)->TrainStep(images.data(), labels.data(), 100, 0.05f, &b).ok());
    ASSERT_EQ(a.words, b.words);
    ASSERT_FALSE(a.words.empty());
    ASSERT_TRUE((*uploaded)->ApplyUpdates(config.step.step_quanta, a.words).ok());
    ASSERT_TRUE((*own)->ApplyOwnEmission(config.step.step_quanta, b.words).ok());
    EXPECT_EQ(*(*uploaded)->ReadWeights(), *(*own)->ReadWeights()) << "step " << step;
  }
  // Words that are not the pass's (another count) break the contract:
  // refused, nothing applied.
  model::Emission c;
  ASSERT_TRUE((*own)->TrainStep(images.data(), labels.data(), 100, 0.05f, &c).ok());
  ASSERT_TRUE((*uploaded)->TrainStep(images.data(), labels.data(), 100, 0.05f, &c).ok());
  std::vector<uint32_t> other(c.words.size() + 1);
  for (size_t k = 0; k < other.size(); ++k) other[k] = static_cast<uint32_t>(k);
  const absl::Status refused = (*own)->ApplyOwnEmission(config.step.step_quanta, other);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_EQ(*(*uploaded)->ReadWeights(), *(*own)->ReadWeights());
}

// AdaGrad on the aggregate (--adagrad-placement aggregate; model/optimizer.h)
// in the fused pass and in the unfused kernel: the peers' movement read from
// the replica's quanta, against AccumulateDelta with peer_step, bit for bit.
TEST(CudaBackend, AggregateAdagradPassesAreBitExactWithTheCpu) {
  SKIP_WITHOUT_GPU();
  const absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.01, 32);
  ASSERT_TRUE(step.ok());
  const size_t n = (size_t{1} << 20) + 7;
  const float lr = 0.05f;
  const double quantum = std::ldexp(1.0, -32);
  model::OptimizerConfig config;
  config.kind = model::OptimizerKind::kAdagrad;
  config.adagrad_placement = model::AdagradPlacement::kAggregate;
  std::vector<float> residual = MakeValues(n, step->tau, Fill::kRandom, 21);
  std::vector<float> grad = MakeValues(n, step->tau * 4, Fill::kRandom, 22);
  // Gradients of +0 and -0 too (the normal draws give two; the first device
  // run found them): the change is then a signed zero.
  for (size_t i = 5; i < n; i += 1009) grad[i] = (i & 1) ? -0.0f : 0.0f;
  const std::vector<float> weights = MakeValues(n, 1.0f, Fill::kRandom, 23);
  std::vector<float> state = MakeValues(n, step->tau, Fill::kRandom, 24);
  for (float& h : state) h = std::fabs(h);
  const std::vector<float> state_before = state;
  // The peers moved one weight in three by up to a few tau.
  std::mt19937_64 rng(25);
  std::vector<int64_t> after_own(n), now(n);
  std::vector<float> peer_step(n);
  for (size_t i = 0; i < n; ++i) {
    after_own[i] = static_cast<int64_t>(rng() >> 8);
    const int64_t moved =
        i % 3 == 0 ? static_cast<int64_t>(rng() % (step->step_quanta * 8)) - step->step_quanta * 4
                   : 0;
    now[i] = after_own[i] + moved;
    peer_step[i] = static_cast<float>(static_cast<double>(moved) * quantum);
  }
  DeviceArray<float> d_residual(residual), d_grad(grad), d_weights(weights), d_state(state);
  DeviceArray<int64_t> d_now(now), d_after_own(after_own);
  const PeerMovement peers{d_now.ptr, d_after_own.ptr, quantum};
  OptimizerRule rule;
  rule.kind = 2;
  rule.lr = lr;
  rule.eps = static_cast<float>(config.adagrad_eps);
  absl::StatusOr<std::unique_ptr<ThresholdPass>> pass =
      ThresholdPass::Create(n, CompactionMethod::kSinglePass, nullptr);
  ASSERT_TRUE(pass.ok()) << pass.status();
  ASSERT_TRUE((*pass)
                  ->LaunchFused(rule, d_grad.ptr, d_state.ptr, d_weights.ptr, d_residual.ptr, n,
                                step->tau, peers)
                  .ok());
  std::vector<uint32_t> gpu_words;
  ASSERT_TRUE((*pass)->Finish(&gpu_words).ok());
  model::AccumulateDelta(config, lr, grad, weights, state, residual, peer_step);
  std::vector<uint32_t> cpu_words;
  ASSERT_TRUE(codec::QuantizeResidual(residual, *step, &cpu_words).ok());
  EXPECT_EQ(gpu_words, cpu_words);
  EXPECT_FALSE(cpu_words.empty());
  EXPECT_TRUE(SameBits(d_residual.Read(), residual))
      << "residuals differ: " << BitDifferences(d_residual.Read(), residual);
  EXPECT_TRUE(SameBits(d_state.Read(), state))
      << "AdaGrad's states differ: " << BitDifferences(d_state.Read(), state);
  // Other rules refuse the movement.
  OptimizerRule momentum = rule;
  momentum.kind = 1;
  EXPECT_EQ((*pass)
                ->LaunchFused(momentum, d_grad.ptr, d_state.ptr, d_weights.ptr, d_residual.ptr, n,
                              step->tau, peers)
                .code(),
            absl::StatusCode::kInvalidArgument);

  // The unfused kernel (the quanta codecs): the change in place of the
  // gradient, which the backend then adds to its residual as AccumulateDelta
  // does. Against AccumulateDelta on a zero residual, so the device's change
  // is added to zero too: the change itself is -0 where the gradient is +-0
  // (kernels.h: "without the final residual add"), and 0 + -0 is +0.
  DeviceArray<float> d_delta(grad), d_state2(state_before);
  ASSERT_TRUE(
      LaunchOptimizerDelta(rule, d_weights.ptr, d_state2.ptr, d_delta.ptr, n, nullptr, peers).ok());
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<float> delta(n, 0.0f), state2 = state_before;
  model::AccumulateDelta(config, lr, grad, weights, state2, delta, peer_step);
  std::vector<float> device_delta = d_delta.Read();
  size_t negative_zeros = 0;
  for (float& x : device_delta) {
    negative_zeros += x == 0.0f && std::signbit(x);
    x = 0.0f + x;
  }
  EXPECT_GT(negative_zeros, 0u) << "no change of -0: the signed zeros above were not exercised";
  EXPECT_TRUE(SameBits(device_delta, delta))
      << "deltas differ: " << BitDifferences(device_delta, delta);
  EXPECT_TRUE(SameBits(d_state2.Read(), state2))
      << "AdaGrad's states differ: " << BitDifferences(d_state2.Read(), state2);
}

// The CUDA backend with --adagrad-placement aggregate: alone it takes the
// steps placement local takes, bit for bit (its own emission is projected
// exactly, so the peers' movement is 0); after a peer's message its
// AdaGrad state moves where the message touched, and only there.
TEST(CudaBackend, AggregateAdagradTakesThePeersMovementAndNothingElse) {
  SKIP_WITHOUT_GPU();
  model::BackendConfig local = SmallConfig(model::UpdateMode::kThreshold);
  local.optimizer.kind = model::OptimizerKind::kAdagrad;
  local.step = *codec::MakeThresholdStep(0.001, 32);
  model::BackendConfig aggregate = local;
  aggregate.optimizer.adagrad_placement = model::AdagradPlacement::kAggregate;
  const uint64_t n = local.shape.param_count();
  absl::StatusOr<codec::FixedPointReplica> init = codec::FixedPointReplica::Create(n, 32);
  ASSERT_TRUE(model::InitializeModel(local.shape, 4, &*init).ok());
  absl::StatusOr<std::unique_ptr<model::Backend>> a = MakeCudaBackend(local);
  absl::StatusOr<std::unique_ptr<model::Backend>> b = MakeCudaBackend(aggregate);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_TRUE((*a)->LoadWeights(init->quanta()).ok());
  ASSERT_TRUE((*b)->LoadWeights(init->quanta()).ok());
  std::vector<float> images;
  std::vector<int32_t> labels;
  ::reckon::testing::SyntheticBatch(100, 784, &images, &labels);
  const int64_t own_step = local.step.step_quanta;
  for (int s = 0; s < 3; ++s) {
    model::Emission ea, eb;
    ASSERT_TRUE((*a)->TrainStep(images.data(), labels.data(), 100, 0.05f, &ea).ok());
    ASSERT_TRUE((*b)->TrainStep(images.data(), labels.data(), 100, 0.05f, &eb).ok());
    ASSERT_EQ(ea.words, eb.words) << "step " << s;
    ASSERT_TRUE((*a)->ApplyOwnEmission(own_step, ea.words).ok());
    ASSERT_TRUE((*b)->ApplyOwnEmission(own_step, eb.words).ok());
    ASSERT_TRUE(SameBits(*(*a)->ReadOptimizerState(), *(*b)->ReadOptimizerState())) << s;
  }
  // A peer's message, then a step.
  const std::vector<uint32_t> peer = ::reckon::testing::RandomUpdates(300, n, 7);
  ASSERT_TRUE((*a)->ApplyUpdates(own_step * 4, peer).ok());
  ASSERT_TRUE((*b)->ApplyUpdates(own_step * 4, peer).ok());
  model::Emission ea, eb;
  ASSERT_TRUE((*a)->TrainStep(images.data(), labels.data(), 100, 0.05f, &ea).ok());
  ASSERT_TRUE((*b)->TrainStep(images.data(), labels.data(), 100, 0.05f, &eb).ok());
  const std::vector<float> ha = *(*a)->ReadOptimizerState(), hb = *(*b)->ReadOptimizerState();
  std::vector<bool> touched(n, false);
  for (const uint32_t w : peer) touched[codec::UpdateIndex(w)] = true;
  size_t moved = 0, elsewhere = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const bool same = std::memcmp(&ha[i], &hb[i], sizeof(float)) == 0;
    (touched[i] ? moved : elsewhere) += !same;
  }
  EXPECT_EQ(elsewhere, 0u) << "AdaGrad's state moved where no peer did";
  EXPECT_GT(moved, peer.size() / 2) << "the peer's movement should reach AdaGrad's state";
}

TEST(CudaBackend, FashionMnistRunMatchesTheCpu) {
  SKIP_WITHOUT_GPU();
  ::reckon::testing::ScratchDir dir;
  double accuracy[2] = {0, 0};
  const char* backends[2] = {"cpu", "cuda"};
  for (int b = 0; b < 2; ++b) {
    const std::string summary = (dir / (std::string(backends[b]) + ".json")).string();
    ::reckon::testing::ProcessResult r = ::reckon::testing::RunProcess(
        WorkerPath(),
        {"--standalone", "--backend", backends[b], "--epochs=2", "--layers=784,256,10",
         "--summary-json=" + summary, "--data_dir", DataDir(), "--progress=off",
         "--http-listen=127.0.0.1:0"},
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find(std::string("backend ") + backends[b]), std::string::npos) << r.out;
    accuracy[b] = TestAccuracy(summary);
  }
  std::printf("2 epochs, threshold mode: cpu %.2f%%, cuda %.2f%%\n", 100 * accuracy[0],
              100 * accuracy[1]);
  EXPECT_GT(accuracy[0], 0.80);
  EXPECT_NEAR(accuracy[1], accuracy[0], 0.015);
}

}  // namespace
}  // namespace reckon::cuda
