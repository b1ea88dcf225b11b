// reckonctl bench gpu [--json]: the CUDA backend's hot paths, side by side
// in one process, at Strom's model size (14.6M parameters) and at 100M:
//   - the threshold pass + compaction (every method) in bytes/s over the
//     bytes it must touch (delta and residual read, residual written: 12 per
//     element, plus 4 per emitted word), against a device-to-device
//     cudaMemcpy (its bytes read + written);
//   - the fused optimizer pass (ThresholdPass::LaunchFused: SGD 12 bytes an
//     element, momentum 20) against the optimizer kernel followed by the
//     pass (20 and 28);
//   - plain cub::DeviceSelect::If on the residual alone;
//   - the batched apply in updates/s, of one pass's words (8 messages) and
//     of 80 peers' Strom-size messages at once (79 x 44,000 updates), and
//     those merged (cuda/merged_apply.h: sorted, summed per index, one add
//     each), checked to leave the same replica;
//   - one training step of Strom's network (784-1800x5-10, sigmoid, 14.4M
//     parameters) at batch 1,024 with fp32 and with tf32 GEMMs, its FLOP/s
//     against cuBLAS sgemm on the same shapes in the same precision, and
//     the pass + copy-out + Rice encoding on the host at that size as a
//     fraction of the fp32 step;
//   - onebit and dyntree8 at Strom's size encoded on the device against
//     the residual's round trip to a host encoder (what the codec mode did
//     before cuda/device_codec.h).
// Where no GPU answers it says so and exits 1.
#include "ctl/bench_gpu.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/json.h"
#include "ctl/commands.h"
#include "ctl/common_flags.h"

#if RECKON_HAVE_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <memory>

#include "base/status_macros.h"
#include "codec/codec.h"
#include "codec/rice.h"
#include "cuda/cublas_api.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/device_codec.h"
#include "cuda/event_timer.h"
#include "cuda/kernels.h"
#include "cuda/merged_apply.h"
#include "cuda/threshold_pass.h"
#endif

ABSL_FLAG(int64_t, reps, 20, "timed repetitions of each measurement; the best counts");
ABSL_FLAG(double, density, 1e-3, "fraction of elements above tau");

namespace reckon::ctl {

#if RECKON_HAVE_CUDA
namespace {

using gpu_bench::CodecRow;
using gpu_bench::DeviceMemory;
using gpu_bench::kStromLayers;

constexpr cuda::CompactionMethod kMethods[] = {cuda::CompactionMethod::kCubSelect,
                                               cuda::CompactionMethod::kSinglePass};
constexpr int kMethodCount = 2;

// The fused pass against the optimizer kernel then the pass, one rule.
struct FusedRow {
  std::string optimizer;
  double bytes_per_element = 0;  // what the fused pass must touch
  double fused_s = 0, separate_s = 0;
  double fused_bps = 0;
};

struct SizeRow {
  uint64_t params = 0;
  uint64_t emitted = 0;
  double memcpy_bps = 0;
  double pass_bps[kMethodCount] = {};  // by kMethods
  double pass_s[kMethodCount] = {};
  double select_if_s = 0;
  double apply_updates_per_s = 0;
  uint64_t apply_80_peers_updates = 0;
  double apply_80_peers_s = 0;
  double apply_80_peers_merged_s = 0;  // cuda/merged_apply.h, the same messages
  std::vector<FusedRow> fused;
};

// A timed pass: the best seconds of `reps` runs of `launch` (one Launch or
// LaunchFused of `pass`, maybe after other kernels), and what the last run
// emitted. One Finish per Launch (threshold_pass.h): each run's launch is
// finished, untimed, before the next run's `reset`, and the last after.
struct PassTiming {
  double seconds = 0;
  uint64_t emitted = 0;
};
template <typename Reset, typename LaunchFn>
absl::StatusOr<PassTiming> TimePass(cuda::ThresholdPass& pass, int reps, Reset reset,
                                    LaunchFn launch) {
  bool launched = false;
  auto finish_and_reset = [&]() -> absl::Status {
    if (launched) {
      launched = false;
      RECKON_RETURN_IF_ERROR(pass.FinishOnDevice().status());
    }
    return reset();
  };
  absl::StatusOr<double> seconds =
      cuda::BestEventSeconds(reps, finish_and_reset, [&]() -> absl::Status {
        RECKON_RETURN_IF_ERROR(launch());
        launched = true;
        return absl::OkStatus();
      });
  if (!seconds.ok()) return seconds.status();
  absl::StatusOr<uint64_t> emitted = pass.FinishOnDevice();
  if (!emitted.ok()) return emitted.status();
  return PassTiming{*seconds, *emitted};
}

absl::StatusOr<SizeRow> MeasureSize(uint64_t n, double density, int reps) {
  SizeRow row;
  row.params = n;
  const float tau = 0.01f;
  std::vector<float> residual(n);
  std::mt19937_64 rng(n);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& r : residual) {
    r = u(rng) < density ? (u(rng) < 0.5f ? 1.5f * tau : -1.5f * tau) : (u(rng) - 0.5f) * tau;
  }
  DeviceMemory<float> pristine, work, delta, copy;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&pristine.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&work.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&delta.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&copy.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(pristine.ptr, residual.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(delta.ptr, 0, n * sizeof(float)));
  auto nothing = [] { return absl::OkStatus(); };
  absl::StatusOr<double> memcpy_s = cuda::BestEventSeconds(reps, nothing, [&]() -> absl::Status {
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(copy.ptr, pristine.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice));
    return absl::OkStatus();
  });
  if (!memcpy_s.ok()) return memcpy_s.status();
  row.memcpy_bps = 2.0 * n * sizeof(float) / *memcpy_s;
  auto reset = [&]() -> absl::Status {
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(work.ptr, pristine.ptr, n * sizeof(float), cudaMemcpyDeviceToDevice));
    return absl::OkStatus();
  };
  for (int m = 0; m < kMethodCount; ++m) {
    absl::StatusOr<std::unique_ptr<cuda::ThresholdPass>> pass =
        cuda::ThresholdPass::Create(n, kMethods[m], nullptr);
    if (!pass.ok()) return pass.status();
    absl::StatusOr<PassTiming> timed =
        TimePass(**pass, reps, reset, [&] { return (*pass)->Launch(delta.ptr, work.ptr, n, tau); });
    if (!timed.ok()) return timed.status();
    row.emitted = timed->emitted;
    row.pass_s[m] = timed->seconds;
    row.pass_bps[m] = (12.0 * n + 4.0 * timed->emitted) / timed->seconds;
  }

  // The fused optimizer pass against the optimizer kernel then the pass.
  // The gradient is small against tau (lr 1), so the residual's density
  // stays the pristine one's.
  {
    std::vector<float> grad(n);
    for (float& g : grad) g = (u(rng) - 0.5f) * tau * 0.01f;
    DeviceMemory<float> pristine_grad, work_grad, state;
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&pristine_grad.ptr, n * sizeof(float)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&work_grad.ptr, n * sizeof(float)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&state.ptr, n * sizeof(float)));
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(pristine_grad.ptr, grad.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    auto reset_all = [&]() -> absl::Status {
      RECKON_RETURN_IF_ERROR(reset());
      RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpy(work_grad.ptr, pristine_grad.ptr, n * sizeof(float),
                                             cudaMemcpyDeviceToDevice));
      RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(state.ptr, 0, n * sizeof(float)));
      return absl::OkStatus();
    };
    for (const int kind : {0, 1}) {
      cuda::OptimizerRule rule;
      rule.kind = kind;
      rule.lr = 1.0f;
      rule.momentum = 0.9f;
      absl::StatusOr<std::unique_ptr<cuda::ThresholdPass>> pass =
          cuda::ThresholdPass::Create(n, cuda::CompactionMethod::kSinglePass, nullptr);
      if (!pass.ok()) return pass.status();
      float* state_ptr = kind == 0 ? nullptr : state.ptr;
      absl::StatusOr<PassTiming> fused = TimePass(**pass, reps, reset_all, [&] {
        return (*pass)->LaunchFused(rule, work_grad.ptr, state_ptr, nullptr, work.ptr, n, tau);
      });
      if (!fused.ok()) return fused.status();
      absl::StatusOr<PassTiming> separate =
          TimePass(**pass, reps, reset_all, [&]() -> absl::Status {
            RECKON_RETURN_IF_ERROR(
                cuda::LaunchOptimizerDelta(rule, nullptr, state_ptr, work_grad.ptr, n, nullptr));
            return (*pass)->Launch(work_grad.ptr, work.ptr, n, tau);
          });
      if (!separate.ok()) return separate.status();
      RECKON_RETURN_IF_ERROR(reset_all());
      FusedRow f;
      f.optimizer = kind == 0 ? "sgd" : "momentum";
      f.bytes_per_element = kind == 0 ? 12 : 20;
      f.fused_s = fused->seconds;
      f.separate_s = separate->seconds;
      f.fused_bps = (f.bytes_per_element * n + 4.0 * fused->emitted) / fused->seconds;
      row.fused.push_back(f);
    }
  }
  absl::StatusOr<double> select = cuda::TimeSelectIfOnResidual(pristine.ptr, n, tau, reps);
  if (!select.ok()) return select.status();
  row.select_if_s = *select;

  // Apply: the emitted words as 8 messages of equal share, one launch.
  absl::StatusOr<std::unique_ptr<cuda::ThresholdPass>> pass =
      cuda::ThresholdPass::Create(n, cuda::CompactionMethod::kSinglePass, nullptr);
  if (!pass.ok()) return pass.status();
  RECKON_RETURN_IF_ERROR(reset());
  RECKON_RETURN_IF_ERROR((*pass)->Launch(nullptr, work.ptr, n, tau));
  absl::StatusOr<uint64_t> count = (*pass)->FinishOnDevice();
  if (!count.ok()) return count.status();
  DeviceMemory<int64_t> quanta, steps;
  DeviceMemory<uint64_t> ends;
  // The replica's count of wraps, as DeviceReplica passes it (its atomics
  // then return the value they found: what production pays).
  DeviceMemory<unsigned long long> wrapped;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&wrapped.ptr, sizeof(unsigned long long)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(wrapped.ptr, 0, sizeof(unsigned long long)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&quanta.ptr, n * sizeof(int64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(quanta.ptr, 0, n * sizeof(int64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&steps.ptr, 8 * sizeof(int64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&ends.ptr, 8 * sizeof(uint64_t)));
  std::vector<int64_t> h_steps(8, int64_t{1} << 25);
  std::vector<uint64_t> h_ends(8);
  for (int m = 0; m < 8; ++m) h_ends[m] = *count * (m + 1) / 8;
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(steps.ptr, h_steps.data(), 8 * sizeof(int64_t), cudaMemcpyHostToDevice));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(ends.ptr, h_ends.data(), 8 * sizeof(uint64_t), cudaMemcpyHostToDevice));
  absl::StatusOr<double> apply_s = cuda::BestEventSeconds(reps, nothing, [&]() -> absl::Status {
    RECKON_RETURN_IF_ERROR(cuda::LaunchApplyWords((*pass)->device_words(), *count, ends.ptr,
                                                  steps.ptr, 8, quanta.ptr, wrapped.ptr, nullptr));
    return cuda::LaunchRefreshTouched((*pass)->device_words(), *count, quanta.ptr, copy.ptr,
                                      1.0 / 4294967296.0, nullptr);
  });
  if (!apply_s.ok()) return apply_s.status();
  row.apply_updates_per_s = *count / *apply_s;

  // 80 peers' worth at once: 79 messages of 44,000 updates (Strom's 69 KB
  // at 12.5 bits an update), each ascending, indices drawn at random.
  {
    constexpr int kPeers = 79;
    constexpr uint64_t kPerMessage = 44'000;
    std::vector<uint32_t> words;
    words.reserve(kPeers * kPerMessage);
    std::vector<uint64_t> h_peer_ends(kPeers);
    std::vector<int64_t> h_peer_steps(kPeers, int64_t{1} << 25);
    std::uniform_int_distribution<uint32_t> index(0, static_cast<uint32_t>(n - 1));
    for (int m = 0; m < kPeers; ++m) {
      std::vector<uint32_t> message(kPerMessage);
      for (uint32_t& w : message) w = index(rng);
      std::sort(message.begin(), message.end());
      message.erase(std::unique(message.begin(), message.end()), message.end());
      for (const uint32_t i : message) words.push_back(i | (u(rng) < 0.5f ? 0x80000000u : 0u));
      h_peer_ends[m] = words.size();
    }
    DeviceMemory<uint32_t> d_words;
    DeviceMemory<uint64_t> d_ends;
    DeviceMemory<int64_t> d_steps;
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_words.ptr, words.size() * sizeof(uint32_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_ends.ptr, kPeers * sizeof(uint64_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_steps.ptr, kPeers * sizeof(int64_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpy(
        d_words.ptr, words.data(), words.size() * sizeof(uint32_t), cudaMemcpyHostToDevice));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_ends.ptr, h_peer_ends.data(),
                                           kPeers * sizeof(uint64_t), cudaMemcpyHostToDevice));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpy(d_steps.ptr, h_peer_steps.data(),
                                           kPeers * sizeof(int64_t), cudaMemcpyHostToDevice));
    absl::StatusOr<double> peers_s = cuda::BestEventSeconds(reps, nothing, [&]() -> absl::Status {
      RECKON_RETURN_IF_ERROR(cuda::LaunchApplyWords(d_words.ptr, words.size(), d_ends.ptr,
                                                    d_steps.ptr, kPeers, quanta.ptr, wrapped.ptr,
                                                    nullptr));
      return cuda::LaunchRefreshTouched(d_words.ptr, words.size(), quanta.ptr, copy.ptr,
                                        1.0 / 4294967296.0, nullptr);
    });
    if (!peers_s.ok()) return peers_s.status();
    row.apply_80_peers_updates = words.size();
    row.apply_80_peers_s = *peers_s;

    // The same messages merged (cuda/merged_apply.h): one add per distinct
    // index. First both once from zero, to check they leave the same
    // replica; then timed as the atomic apply was.
    cuda::MergedApply merged;
    DeviceMemory<int64_t> merged_quanta;
    RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&merged_quanta.ptr, n * sizeof(int64_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(merged_quanta.ptr, 0, n * sizeof(int64_t)));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(quanta.ptr, 0, n * sizeof(int64_t)));
    RECKON_RETURN_IF_ERROR(cuda::LaunchApplyWords(d_words.ptr, words.size(), d_ends.ptr,
                                                  d_steps.ptr, kPeers, quanta.ptr, wrapped.ptr,
                                                  nullptr));
    RECKON_RETURN_IF_ERROR(merged.Launch(d_words.ptr, words.size(), d_ends.ptr, d_steps.ptr, kPeers,
                                         merged_quanta.ptr, copy.ptr, 1.0 / 4294967296.0,
                                         wrapped.ptr, nullptr));
    std::vector<int64_t> atomic_result(n), merged_result(n);
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(atomic_result.data(), quanta.ptr, n * sizeof(int64_t), cudaMemcpyDeviceToHost));
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpy(merged_result.data(), merged_quanta.ptr,
                                           n * sizeof(int64_t), cudaMemcpyDeviceToHost));
    if (atomic_result != merged_result) {
      return absl::InternalError("the merged apply left another replica than the atomic one");
    }
    absl::StatusOr<double> merged_s = cuda::BestEventSeconds(reps, nothing, [&]() -> absl::Status {
      return merged.Launch(d_words.ptr, words.size(), d_ends.ptr, d_steps.ptr, kPeers,
                           merged_quanta.ptr, copy.ptr, 1.0 / 4294967296.0, wrapped.ptr, nullptr);
    });
    if (!merged_s.ok()) return merged_s.status();
    row.apply_80_peers_merged_s = *merged_s;
  }
  return row;
}

struct StepRow {
  uint64_t params = 0;
  double step_s = 0, pass_copy_encode_s = 0, flops = 0, sgemm_flops = 0;
};

constexpr int kStepBatch = 1024;

// One training step of Strom's network on the CUDA backend at batch 1,024
// with GEMMs of `precision`, and cuBLAS sgemm alone on the same shapes in
// the same math mode; with `with_pass`, the threshold pass + copy-out +
// Rice encoding of that size alone too.
absl::StatusOr<StepRow> MeasureStep(int reps, model::GemmPrecision precision, bool with_pass) {
  StepRow row;
  model::BackendConfig config;
  absl::StatusOr<model::ModelShape> shape = model::ModelShape::Parse(kStromLayers, "sigmoid");
  if (!shape.ok()) return shape.status();
  config.shape = *shape;
  config.max_batch = kStepBatch;
  config.step = *codec::MakeThresholdStep(0.01, 32);
  config.gemm_precision = precision;
  absl::StatusOr<std::unique_ptr<model::Backend>> backend = cuda::MakeCudaBackend(config);
  if (!backend.ok()) return backend.status();
  row.params = shape->param_count();
  std::vector<float> images(size_t{kStepBatch} * 784);
  std::vector<int32_t> labels(kStepBatch);
  std::mt19937 rng(1);
  for (float& x : images) x = std::uniform_real_distribution<float>(0, 1)(rng);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  model::Emission emission;
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  for (int r = 0; r < reps + 2; ++r) {  // two warm-up steps
    const auto t0 = Clock::now();
    absl::StatusOr<model::BatchStats> s =
        (*backend)->TrainStep(images.data(), labels.data(), kStepBatch, 0.01f, &emission);
    if (!s.ok()) return s.status();
    if (r >= 2) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  row.step_s = best;
  // Forward + weight and input gradients (not the first layer's input).
  double macs = 0;
  const auto& layers = shape->layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    macs += double{kStepBatch} * layers[l].in * layers[l].out * (l == 0 ? 2 : 3);
  }
  row.flops = 2 * macs / row.step_s;

  // sgemm alone on the same shapes.
  absl::StatusOr<const cuda::CublasApi*> blas = cuda::Cublas();
  if (!blas.ok()) return blas.status();
  const cuda::CublasApi& api = **blas;
  cublasHandle_t handle = nullptr;
  RECKON_CUBLAS_RETURN_IF_ERROR(api.create(&handle));
  // Destroyed on every return below.
  std::unique_ptr<cublasContext, decltype(api.destroy)> handle_owner(handle, api.destroy);
  RECKON_CUBLAS_RETURN_IF_ERROR(api.set_math_mode(handle, precision == model::GemmPrecision::kTf32
                                                              ? CUBLAS_TF32_TENSOR_OP_MATH
                                                              : CUBLAS_PEDANTIC_MATH));
  size_t widest = 0;
  for (const auto& l : layers) widest = std::max<size_t>(widest, size_t(l.in) * l.out);
  const size_t activations = size_t{kStepBatch} * 1800;
  DeviceMemory<float> a, b, c;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&a.ptr, widest * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr, std::max(widest, activations) * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&c.ptr, std::max(widest, activations) * sizeof(float)));
  const float one = 1, zero = 0;
  absl::StatusOr<double> gemm_s = cuda::BestEventSeconds(
      reps, [] { return absl::OkStatus(); },
      [&]() -> absl::Status {
        for (size_t l = 0; l < layers.size(); ++l) {
          const int in = layers[l].in, out = layers[l].out;
          RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, kStepBatch,
                                                  in, &one, a.ptr, in, b.ptr, in, &zero, c.ptr,
                                                  out));
          RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out,
                                                  kStepBatch, &one, b.ptr, in, c.ptr, out, &zero,
                                                  a.ptr, in));
          if (l > 0) {
            RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in,
                                                    kStepBatch, out, &one, a.ptr, in, c.ptr, out,
                                                    &zero, b.ptr, in));
          }
        }
        return absl::OkStatus();
      });
  if (!gemm_s.ok()) return gemm_s.status();
  row.sgemm_flops = 2 * macs / *gemm_s;
  if (!with_pass) return row;

  // Pass + copy-out + Rice encoding at this size, at a density of 1e-3.
  const uint64_t n = row.params;
  std::vector<float> residual(n);
  for (size_t i = 0; i < n; ++i) residual[i] = (i % 1000 == 0) ? 0.02f : 0.001f;
  DeviceMemory<float> d_residual;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_residual.ptr, n * sizeof(float)));
  absl::StatusOr<std::unique_ptr<cuda::ThresholdPass>> pass =
      cuda::ThresholdPass::Create(n, cuda::CompactionMethod::kSinglePass, nullptr);
  if (!pass.ok()) return pass.status();
  std::vector<uint32_t> words;
  std::string payload;
  best = 1e30;
  for (int r = 0; r < reps; ++r) {
    RECKON_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(d_residual.ptr, residual.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    const auto t0 = Clock::now();
    RECKON_RETURN_IF_ERROR((*pass)->Launch(nullptr, d_residual.ptr, n, config.step.tau));
    RECKON_RETURN_IF_ERROR((*pass)->Finish(&words));
    codec::EncodeRice(words, codec::OptimalRiceK(words), &payload);
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  row.pass_copy_encode_s = best;
  return row;
}

}  // namespace
#endif

int RunBenchGpu(const std::vector<std::string>& args, std::ostream& out, std::ostream& err) {
  const base::FlagScope scope{"reckonctl bench gpu", {{"json"}, {"reps"}, {"density"}}};
  if (int code = base::ParseFlagsOrExit(scope, args, out, err); code >= 0) return code;
  const int64_t reps = absl::GetFlag(FLAGS_reps);
  const double density = absl::GetFlag(FLAGS_density);
  if (reps < 1 || !(density >= 0 && density <= 1)) {
    err << "reckonctl bench gpu: --reps must be >= 1 and --density in [0, 1]\n";
    return kExitUsage;
  }
#if !RECKON_HAVE_CUDA
  err << "reckonctl bench gpu: this build has no CUDA support (nvcc was not found at build "
         "time)\n";
  return kExitFailed;
#else
  const bool json = absl::GetFlag(FLAGS_json);
  absl::StatusOr<cuda::DeviceInfo> device = cuda::ProbeDevice();
  if (!device.ok()) {
    err << "reckonctl bench gpu: " << device.status().message() << "\n";
    return kExitFailed;
  }
  std::vector<SizeRow> rows;
  for (const uint64_t n : {uint64_t{14'600'000}, uint64_t{100'000'000}}) {
    absl::StatusOr<SizeRow> row = MeasureSize(n, density, static_cast<int>(reps));
    if (!row.ok()) {
      err << "reckonctl bench gpu: " << row.status().message() << "\n";
      return kExitFailed;
    }
    rows.push_back(*row);
  }
  absl::StatusOr<StepRow> step =
      MeasureStep(static_cast<int>(reps), model::GemmPrecision::kFp32, /*with_pass=*/true);
  absl::StatusOr<StepRow> step_tf32 =
      step.ok() ? MeasureStep(static_cast<int>(reps), model::GemmPrecision::kTf32, false)
                : step.status();
  if (!step_tf32.ok()) {
    err << "reckonctl bench gpu: " << step_tf32.status().message() << "\n";
    return kExitFailed;
  }
  absl::StatusOr<std::vector<CodecRow>> codecs = gpu_bench::MeasureCodecs(static_cast<int>(reps));
  if (!codecs.ok()) {
    err << "reckonctl bench gpu: " << codecs.status().message() << "\n";
    return kExitFailed;
  }
  const double apply_80_ms = rows[0].apply_80_peers_s * 1e3;
  if (json) {
    base::Json sizes = base::Json::array();
    for (const SizeRow& r : rows) {
      base::Json methods = base::Json::object();
      for (int m = 0; m < kMethodCount; ++m) {
        methods[cuda::CompactionMethodName(kMethods[m])] = {
            {"seconds", r.pass_s[m]},
            {"bytes_per_s", r.pass_bps[m]},
            {"vs_memcpy", r.pass_bps[m] / r.memcpy_bps}};
      }
      base::Json fused = base::Json::array();
      for (const FusedRow& f : r.fused) {
        fused.push_back({{"optimizer", f.optimizer},
                         {"bytes_per_element", f.bytes_per_element},
                         {"fused_s", f.fused_s},
                         {"separate_s", f.separate_s},
                         {"speedup", f.separate_s / f.fused_s},
                         {"fused_vs_memcpy", f.fused_bps / r.memcpy_bps}});
      }
      sizes.push_back({{"params", r.params},
                       {"emitted", r.emitted},
                       {"memcpy_bytes_per_s", r.memcpy_bps},
                       {"methods", methods},
                       {"single_pass_vs_memcpy", r.pass_bps[1] / r.memcpy_bps},
                       {"select_if_residual_s", r.select_if_s},
                       {"fused", fused},
                       {"apply_updates_per_s", r.apply_updates_per_s},
                       {"apply_80_peers_updates", r.apply_80_peers_updates},
                       {"apply_80_peers_s", r.apply_80_peers_s},
                       {"apply_80_peers_merged_s", r.apply_80_peers_merged_s},
                       {"merged_speedup", r.apply_80_peers_s / r.apply_80_peers_merged_s}});
    }
    auto step_json = [](const StepRow& s) {
      return base::Json{{"params", s.params},           {"batch", kStepBatch},
                        {"step_s", s.step_s},           {"flops", s.flops},
                        {"sgemm_flops", s.sgemm_flops}, {"ratio", s.flops / s.sgemm_flops}};
    };
    base::Json fp32 = step_json(*step);
    fp32["pass_copy_encode_s"] = step->pass_copy_encode_s;
    fp32["fraction"] = step->pass_copy_encode_s / step->step_s;
    fp32["apply_80_peers_fraction"] = rows[0].apply_80_peers_s / step->step_s;
    base::Json codec_rows = base::Json::array();
    for (const CodecRow& c : *codecs) {
      codec_rows.push_back({{"codec", c.codec},
                            {"device_encode_s", c.device_s},
                            {"host_encode_s", c.host_s},
                            {"speedup", c.host_s / c.device_s},
                            {"device_fraction_of_step", c.device_s / step->step_s}});
    }
    const base::Json figures = {{"device", device->name}, {"density", density},
                                {"sizes", sizes},         {"codecs", codec_rows},
                                {"step", fp32},           {"step_tf32", step_json(*step_tf32)}};
    out << figures.dump() << "\n";
    return kExitOk;
  }
  out << absl::StrFormat("GPU: %s, density %g, best of %d\n", device->name, density, reps);
  for (const SizeRow& r : rows) {
    out << absl::StrFormat("%d params: memcpy %.1f GB/s; select-if on the residual %.3f ms\n",
                           r.params, r.memcpy_bps / 1e9, r.select_if_s * 1e3);
    for (int m = 0; m < kMethodCount; ++m) {
      out << absl::StrFormat("  pass %-17s %8.3f ms  %7.1f GB/s  %.2fx memcpy (target 0.85x)\n",
                             cuda::CompactionMethodName(kMethods[m]), r.pass_s[m] * 1e3,
                             r.pass_bps[m] / 1e9, r.pass_bps[m] / r.memcpy_bps);
    }
    for (const FusedRow& f : r.fused) {
      out << absl::StrFormat("  fused %-8s %8.3f ms against %.3f separate (%.2fx), %.2fx memcpy\n",
                             f.optimizer, f.fused_s * 1e3, f.separate_s * 1e3,
                             f.separate_s / f.fused_s, f.fused_bps / r.memcpy_bps);
    }
    out << absl::StrFormat(
        "  apply: %.3g updates/s (one pass's words); 80 peers' %d updates "
        "in %.3f ms (%.3g updates/s); merged %.3f ms (%.2fx)\n",
        r.apply_updates_per_s, r.apply_80_peers_updates, r.apply_80_peers_s * 1e3,
        r.apply_80_peers_updates / r.apply_80_peers_s, r.apply_80_peers_merged_s * 1e3,
        r.apply_80_peers_s / r.apply_80_peers_merged_s);
  }
  for (const StepRow* s : {&*step, &*step_tf32}) {
    out << absl::StrFormat(
        "Strom's network (%d params), batch %d, %s GEMMs: step %.3f ms, %.3g FLOP/s vs sgemm "
        "%.3g = %.2fx (target >= 0.6x)\n",
        s->params, kStepBatch, s == &*step ? "fp32" : "tf32", s->step_s * 1e3, s->flops,
        s->sgemm_flops, s->flops / s->sgemm_flops);
  }
  out << absl::StrFormat(
      "pass + copy-out + Rice %.3f ms = %.2f%% of the fp32 step (target <= 3%%); 80 peers' "
      "apply %.3f ms = %.1f%% of it\n",
      step->pass_copy_encode_s * 1e3, 100 * step->pass_copy_encode_s / step->step_s, apply_80_ms,
      100 * rows[0].apply_80_peers_s / step->step_s);
  for (const CodecRow& c : *codecs) {
    out << absl::StrFormat(
        "%s at Strom's size: encoded on the device %.3f ms (%.1f%% of the fp32 step), on the "
        "host with the residual's round trip %.3f ms: %.1fx\n",
        c.codec, c.device_s * 1e3, 100 * c.device_s / step->step_s, c.host_s * 1e3,
        c.host_s / c.device_s);
  }
  return kExitOk;
#endif
}

}  // namespace reckon::ctl
