// The flat replica on a GPU (cuda/cuda_flat_replica.h) against the host's
// (model/flat_replica.h): the same parameters in, the same words, residual,
// replica and parameters out, bit for bit; a NaN refused before the
// residual takes anything. Skips, saying why, where there is no GPU; the
// refusal without one runs everywhere.
#include "cuda/cuda_flat_replica.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "codec/fixed_point.h"
#include "codec/update_words.h"
#include "cuda/device.h"
#include "tests/gpu_skip.h"

namespace reckon::cuda {
namespace {

// A float32 array in device memory, freed at scope exit.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) : n(n) {
    EXPECT_EQ(cudaMalloc(&ptr, n * sizeof(float)), cudaSuccess);
  }
  ~DeviceFloats() { cudaFree(ptr); }
  void Set(const std::vector<float>& host) {
    ASSERT_EQ(cudaMemcpy(ptr, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<float> Get() const {
    std::vector<float> host(n);
    EXPECT_EQ(cudaMemcpy(host.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return host;
  }
  std::span<float> span() { return {ptr, n}; }
  float* ptr = nullptr;
  size_t n;
};

constexpr uint64_t kParams = 100'003;  // not a multiple of any tile
constexpr int kFractionBits = 32;

std::vector<int64_t> RandomQuanta(uint64_t seed) {
  codec::SplitMix64 rng(seed);
  std::vector<int64_t> q(kParams);
  // Weights in about [-0.5, 0.5].
  for (int64_t& v : q)
    v = static_cast<int64_t>(rng.Uniform(uint64_t{1} << 32)) - (int64_t{1} << 31);
  return q;
}

// A peer's message: ascending indices, random signs, about one in `gap`.
std::vector<uint32_t> RandomWords(codec::SplitMix64& rng, uint64_t gap) {
  std::vector<uint32_t> words;
  for (uint64_t i = rng.Uniform(gap); i < kParams; i += 1 + rng.Uniform(2 * gap)) {
    words.push_back(codec::PackUpdate(static_cast<uint32_t>(i), rng.Next() & 1));
  }
  return words;
}

// What an optimizer does to the parameters: a small change everywhere, a
// large one (several tau) on a few.
void OptimizerStep(codec::SplitMix64& rng, std::vector<float>& params) {
  for (float& p : params) {
    const double u = double(rng.Next() >> 11) / double(uint64_t{1} << 53) - 0.5;
    p += static_cast<float>(rng.Uniform(50) == 0 ? 0.02 * u : 0.001 * u);
  }
}

// A host replica and a GPU one, both holding `start`.
absl::Status MakeTwins(const std::vector<int64_t>& start, std::unique_ptr<model::FlatReplica>* host,
                       std::unique_ptr<model::FlatReplica>* gpu) {
  absl::StatusOr<std::unique_ptr<model::FlatReplica>> h =
      model::MakeHostFlatReplica(kParams, kFractionBits);
  if (!h.ok()) return h.status();
  absl::StatusOr<std::unique_ptr<model::FlatReplica>> g =
      MakeCudaFlatReplica(kParams, kFractionBits, 0);
  if (!g.ok()) return g.status();
  *host = *std::move(h);
  *gpu = *std::move(g);
  if (absl::Status s = (*host)->LoadWeights(start); !s.ok()) return s;
  return (*gpu)->LoadWeights(start);
}

TEST(CudaFlatReplica, EmitsAndAppliesBitForBitAsTheHostReplica) {
  SKIP_WITHOUT_GPU();
  std::unique_ptr<model::FlatReplica> host, gpu;
  ASSERT_TRUE(MakeTwins(RandomQuanta(7), &host, &gpu).ok());
  absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.002, kFractionBits);
  ASSERT_TRUE(step.ok());
  std::vector<float> params(kParams);
  ASSERT_TRUE(host->WriteInto(params).ok());
  DeviceFloats device_params(kParams);
  ASSERT_TRUE(gpu->WriteInto(device_params.span()).ok());
  ASSERT_EQ(device_params.Get(), params);
  codec::SplitMix64 rng(11);
  uint64_t emitted = 0;
  for (int s = 0; s < 25; ++s) {
    SCOPED_TRACE(s);
    OptimizerStep(rng, params);
    device_params.Set(params);
    std::vector<uint32_t> host_words, gpu_words;
    ASSERT_TRUE(host->Emit(params, *step, &host_words).ok());
    ASSERT_TRUE(gpu->OrderAfter(0).ok());
    ASSERT_TRUE(gpu->Emit(device_params.span(), *step, &gpu_words).ok());
    ASSERT_EQ(gpu_words, host_words);
    emitted += host_words.size();
    ASSERT_TRUE(host->ApplyOwnEmission(step->step_quanta, host_words).ok());
    ASSERT_TRUE(gpu->ApplyOwnEmission(step->step_quanta, gpu_words).ok());
    // Two peers' messages in one batch, touching some of the same weights;
    // every fifth step a dense one.
    const std::vector<uint32_t> a = RandomWords(rng, 40), b = RandomWords(rng, 90);
    const model::UpdateRef batch[] = {{step->step_quanta, a, {}}, {3 * step->step_quanta, b, {}}};
    ASSERT_TRUE(host->ApplyUpdateBatch(batch).ok());
    ASSERT_TRUE(gpu->ApplyUpdateBatch(batch).ok());
    if (s % 5 == 4) {
      const std::vector<int64_t> dense = RandomQuanta(100 + s);
      ASSERT_TRUE(host->ApplyDense(dense).ok());
      ASSERT_TRUE(gpu->ApplyDense(dense).ok());
    }
    ASSERT_TRUE(host->WriteInto(params).ok());
    ASSERT_TRUE(gpu->WriteInto(device_params.span()).ok());
    const std::vector<float> gpu_params = device_params.Get();
    ASSERT_EQ(std::memcmp(gpu_params.data(), params.data(), kParams * sizeof(float)), 0);
  }
  EXPECT_GT(emitted, 25u * 100) << "the steps should cross tau";
  EXPECT_EQ(*gpu->WeightHash(), *host->WeightHash());
  EXPECT_EQ(*gpu->ReadWeights(), *host->ReadWeights());
  const std::vector<float> host_residual = *host->ReadResidual();
  const std::vector<float> gpu_residual = *gpu->ReadResidual();
  ASSERT_EQ(gpu_residual.size(), kParams);
  EXPECT_EQ(std::memcmp(gpu_residual.data(), host_residual.data(), kParams * sizeof(float)), 0);
}

TEST(CudaFlatReplica, ANonFiniteParameterIsRefusedWithTheResidualAsItWas) {
  SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<model::FlatReplica>> gpu =
      MakeCudaFlatReplica(kParams, kFractionBits, 0);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  ASSERT_TRUE((*gpu)->LoadWeights(RandomQuanta(3)).ok());
  absl::StatusOr<codec::ThresholdStep> step = codec::MakeThresholdStep(0.002, kFractionBits);
  ASSERT_TRUE(step.ok());
  DeviceFloats device_params(kParams);
  ASSERT_TRUE((*gpu)->WriteInto(device_params.span()).ok());
  std::vector<float> params = device_params.Get();
  codec::SplitMix64 rng(5);
  OptimizerStep(rng, params);
  device_params.Set(params);
  std::vector<uint32_t> words;
  ASSERT_TRUE((*gpu)->Emit(device_params.span(), *step, &words).ok());
  const std::vector<float> residual = *(*gpu)->ReadResidual();
  const std::string hash = *(*gpu)->WeightHash();
  OptimizerStep(rng, params);
  params[90'001] = std::numeric_limits<float>::quiet_NaN();
  params[77] = std::numeric_limits<float>::infinity();
  device_params.Set(params);
  const absl::Status s = (*gpu)->Emit(device_params.span(), *step, &words);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("parameter 77 is inf"), std::string::npos) << s;
  EXPECT_TRUE(words.empty());
  const std::vector<float> after = *(*gpu)->ReadResidual();
  EXPECT_EQ(std::memcmp(after.data(), residual.data(), kParams * sizeof(float)), 0);
  EXPECT_EQ(*(*gpu)->WeightHash(), hash);
}

// A member's step that takes a weight past the int64 range wraps on every
// replica alike (modulo 2^64) and is counted (Backend::WeightsWrapped,
// which the gossip counts as weights_wrapped): on the GPU as on the host.
TEST(CudaFlatReplica, WrapsAreCountedAsTheHostCountsThem) {
  SKIP_WITHOUT_GPU();
  std::vector<int64_t> start = RandomQuanta(9);
  start[0] = std::numeric_limits<int64_t>::max();
  start[1] = std::numeric_limits<int64_t>::min();
  std::unique_ptr<model::FlatReplica> host, gpu;
  ASSERT_TRUE(MakeTwins(start, &host, &gpu).ok());
  EXPECT_EQ(gpu->WeightsWrapped(), 0u);
  // +step at 0 and -step at 1 wrap; 2 does not. A dense message takes 0
  // back across.
  const std::vector<uint32_t> words = {codec::PackUpdate(0, false), codec::PackUpdate(1, true),
                                       codec::PackUpdate(2, false)};
  const model::UpdateRef batch[] = {{int64_t{1} << 20, words, {}}};
  std::vector<int64_t> dense(kParams, 0);
  dense[0] = -(int64_t{1} << 21);
  for (model::FlatReplica* r : {host.get(), gpu.get()}) {
    ASSERT_TRUE(r->ApplyUpdateBatch(batch).ok());
    ASSERT_TRUE(r->ApplyDense(dense).ok());
  }
  EXPECT_EQ(host->WeightsWrapped(), 3u);
  EXPECT_EQ(gpu->WeightsWrapped(), 3u);
  EXPECT_EQ(*gpu->WeightHash(), *host->WeightHash());
}

// Runs everywhere: without a GPU, device 0 is refused saying so; with one,
// a device that is not there.
TEST(CudaFlatReplica, AMissingDeviceIsRefusedSayingWhy) {
  const bool have_gpu = ProbeDevice().ok();
  const int device = have_gpu ? 999 : 0;
  absl::StatusOr<std::unique_ptr<model::FlatReplica>> gpu =
      MakeCudaFlatReplica(kParams, kFractionBits, device);
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kUnavailable) << gpu.status();
  EXPECT_NE(gpu.status().message().find(have_gpu ? "no CUDA device 999" : "CUDA"),
            std::string::npos)
      << gpu.status();
  // And what no device can hold, before any device is asked.
  EXPECT_EQ(MakeCudaFlatReplica(0, kFractionBits, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCudaFlatReplica(kParams, 63, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace reckon::cuda
