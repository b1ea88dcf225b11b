// reckonctl bench gpu [--json]: the CUDA backend's hot paths, side by side
// in one process, at Strom's model size (14.6M parameters) and at 100M:
//   - the threshold pass + compaction (both methods) in bytes/s over the
//     bytes it must touch (delta and residual read, residual written: 12 per
//     element, plus 4 per emitted word), against a device-to-device
//     cudaMemcpy (its bytes read + written);
//   - plain cub::DeviceSelect::If on the residual alone;
//   - pass + copy-out of the words + Rice encoding on the host, as a
//     fraction of one training step of a ~14.2M-parameter MLP
//     (784-2048-2048-2048-2048-10, batch 256), and that step's FLOP/s
//     against cuBLAS sgemm on the same GEMM shapes;
//   - the batched apply in updates/s.
// Where no GPU answers it says so and exits 1.
#include <cmath>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_format.h"
#include "base/flags.h"
#include "base/json.h"
#include "ctl/commands.h"
#include "ctl/flags.h"

#if RECKON_HAVE_CUDA
#include <cuda_runtime.h>

#include <chrono>
#include <memory>

#include "base/status_macros.h"
#include "codec/rice.h"
#include "cuda/cublas_api.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_check.h"
#include "cuda/device.h"
#include "cuda/event_timer.h"
#include "cuda/kernels.h"
#include "cuda/threshold_pass.h"
#endif

ABSL_FLAG(int64_t, reps, 20, "timed repetitions of each measurement; the best counts");
ABSL_FLAG(double, density, 1e-3, "fraction of elements above tau");

namespace reckon::ctl {

#if RECKON_HAVE_CUDA
namespace {

struct SizeRow {
  uint64_t params = 0;
  uint64_t emitted = 0;
  double memcpy_bps = 0;
  double pass_bps[2] = {0, 0};  // kCubSelect, kSinglePass
  double select_if_s = 0, pass_s[2] = {0, 0};
  double apply_updates_per_s = 0;
};

template <typename T>
struct DeviceMemory {
  T* ptr = nullptr;
  ~DeviceMemory() { cudaFree(ptr); }
};

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
  const cuda::CompactionMethod methods[2] = {cuda::CompactionMethod::kCubSelect,
                                             cuda::CompactionMethod::kSinglePass};
  for (int m = 0; m < 2; ++m) {
    absl::StatusOr<std::unique_ptr<cuda::ThresholdPass>> pass =
        cuda::ThresholdPass::Create(n, methods[m], nullptr);
    if (!pass.ok()) return pass.status();
    // One Finish per Launch (threshold_pass.h): each timed launch is
    // finished, untimed, before the next run's reset.
    bool launched = false;
    auto finish_and_reset = [&]() -> absl::Status {
      if (launched) {
        launched = false;
        RECKON_RETURN_IF_ERROR((*pass)->FinishOnDevice().status());
      }
      return reset();
    };
    absl::StatusOr<double> s =
        cuda::BestEventSeconds(reps, finish_and_reset, [&]() -> absl::Status {
          RECKON_RETURN_IF_ERROR((*pass)->Launch(delta.ptr, work.ptr, n, tau));
          launched = true;
          return absl::OkStatus();
        });
    if (!s.ok()) return s.status();
    absl::StatusOr<uint64_t> count = (*pass)->FinishOnDevice();
    if (!count.ok()) return count.status();
    row.emitted = *count;
    row.pass_s[m] = *s;
    row.pass_bps[m] = (12.0 * n + 4.0 * *count) / *s;
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
                                                  steps.ptr, 8, quanta.ptr, nullptr));
    return cuda::LaunchRefreshTouched((*pass)->device_words(), *count, quanta.ptr, copy.ptr,
                                      1.0 / 4294967296.0, nullptr);
  });
  if (!apply_s.ok()) return apply_s.status();
  row.apply_updates_per_s = *count / *apply_s;
  return row;
}

struct StepRow {
  uint64_t params = 0;
  double step_s = 0, pass_copy_encode_s = 0, flops = 0, sgemm_flops = 0;
};

// One training step of a ~14.2M-parameter MLP on the CUDA backend, and the
// threshold pass + copy-out + Rice encoding of that size alone.
absl::StatusOr<StepRow> MeasureStep(int reps) {
  StepRow row;
  model::BackendConfig config;
  absl::StatusOr<model::ModelShape> shape =
      model::ModelShape::Parse("784,2048,2048,2048,2048,10", "relu");
  if (!shape.ok()) return shape.status();
  config.shape = *shape;
  config.max_batch = 256;
  config.step = *codec::MakeThresholdStep(0.01, 32);
  absl::StatusOr<std::unique_ptr<model::Backend>> backend = cuda::MakeCudaBackend(config);
  if (!backend.ok()) return backend.status();
  row.params = shape->param_count();
  std::vector<float> images(256 * 784);
  std::vector<int32_t> labels(256);
  std::mt19937 rng(1);
  for (float& x : images) x = std::uniform_real_distribution<float>(0, 1)(rng);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int32_t(i % 10);
  model::Emission emission;
  using Clock = std::chrono::steady_clock;
  double best = 1e30;
  for (int r = 0; r < reps + 2; ++r) {  // two warm-up steps
    const auto t0 = Clock::now();
    absl::StatusOr<model::BatchStats> s =
        (*backend)->TrainStep(images.data(), labels.data(), 256, 0.01f, &emission);
    if (!s.ok()) return s.status();
    if (r >= 2) best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  row.step_s = best;
  // Forward + weight and input gradients (not the first layer's input).
  double macs = 0;
  const auto& layers = shape->layers();
  for (size_t l = 0; l < layers.size(); ++l) {
    macs += 256.0 * layers[l].in * layers[l].out * (l == 0 ? 2 : 3);
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
  RECKON_CUBLAS_RETURN_IF_ERROR(api.set_math_mode(handle, CUBLAS_PEDANTIC_MATH));
  DeviceMemory<float> a, b, c;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&a.ptr, 2048 * 2048 * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&b.ptr, 2048 * 2048 * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&c.ptr, 2048 * 2048 * sizeof(float)));
  const float one = 1, zero = 0;
  absl::StatusOr<double> gemm_s = cuda::BestEventSeconds(
      reps, [] { return absl::OkStatus(); },
      [&]() -> absl::Status {
        for (size_t l = 0; l < layers.size(); ++l) {
          const int in = layers[l].in, out = layers[l].out;
          RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, out, 256, in,
                                                    &one, a.ptr, in, b.ptr, in, &zero, c.ptr, out));
          RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_T, in, out, 256,
                                                    &one, b.ptr, in, a.ptr, out, &zero, c.ptr, in));
          if (l > 0) {
            RECKON_CUBLAS_RETURN_IF_ERROR(api.sgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, in, 256,
                                                      out, &one, a.ptr, in, b.ptr, out, &zero,
                                                      c.ptr, in));
          }
        }
        return absl::OkStatus();
      });
  if (!gemm_s.ok()) return gemm_s.status();
  row.sgemm_flops = 2 * macs / *gemm_s;

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
  return kExitBadInput;
#else
  const bool json = absl::GetFlag(FLAGS_json);
  absl::StatusOr<cuda::DeviceInfo> device = cuda::ProbeDevice();
  if (!device.ok()) {
    err << "reckonctl bench gpu: " << device.status().message() << "\n";
    return kExitBadInput;
  }
  std::vector<SizeRow> rows;
  for (const uint64_t n : {uint64_t{14'600'000}, uint64_t{100'000'000}}) {
    absl::StatusOr<SizeRow> row = MeasureSize(n, density, static_cast<int>(reps));
    if (!row.ok()) {
      err << "reckonctl bench gpu: " << row.status().message() << "\n";
      return kExitBadInput;
    }
    rows.push_back(*row);
  }
  absl::StatusOr<StepRow> step = MeasureStep(static_cast<int>(reps));
  if (!step.ok()) {
    err << "reckonctl bench gpu: " << step.status().message() << "\n";
    return kExitBadInput;
  }
  if (json) {
    base::Json sizes = base::Json::array();
    for (const SizeRow& r : rows) {
      sizes.push_back({{"params", r.params},
                       {"emitted", r.emitted},
                       {"memcpy_bytes_per_s", r.memcpy_bps},
                       {"cub_select_pass_bytes_per_s", r.pass_bps[0]},
                       {"single_pass_bytes_per_s", r.pass_bps[1]},
                       {"single_pass_vs_memcpy", r.pass_bps[1] / r.memcpy_bps},
                       {"select_if_residual_s", r.select_if_s},
                       {"single_pass_s", r.pass_s[1]},
                       {"cub_select_pass_s", r.pass_s[0]},
                       {"apply_updates_per_s", r.apply_updates_per_s}});
    }
    const base::Json figures = {
        {"device", device->name},
        {"density", density},
        {"sizes", sizes},
        {"step",
         {{"params", step->params},
          {"step_s", step->step_s},
          {"pass_copy_encode_s", step->pass_copy_encode_s},
          {"fraction", step->pass_copy_encode_s / step->step_s},
          {"flops", step->flops},
          {"sgemm_flops", step->sgemm_flops},
          {"ratio", step->flops / step->sgemm_flops}}}};
    out << figures.dump() << "\n";
    return kExitOk;
  }
  out << absl::StrFormat("GPU: %s, density %g, best of %d\n", device->name, density, reps);
  out << "  params      memcpy GB/s  cub-select GB/s  single-pass GB/s  vs memcpy  "
         "select-if(resid) ms  single-pass ms  apply upd/s\n";
  for (const SizeRow& r : rows) {
    out << absl::StrFormat("  %-10d  %11.1f  %15.1f  %16.1f  %8.2fx  %19.3f  %14.3f  %11.3g\n",
                           r.params, r.memcpy_bps / 1e9, r.pass_bps[0] / 1e9, r.pass_bps[1] / 1e9,
                           r.pass_bps[1] / r.memcpy_bps, r.select_if_s * 1e3, r.pass_s[1] * 1e3,
                           r.apply_updates_per_s);
  }
  out << absl::StrFormat(
      "Training step, %d params, batch 256: %.3f ms; pass + copy-out + Rice %.3f ms = %.2f%% "
      "(target <= 2%%); %.3g FLOP/s vs sgemm %.3g = %.2fx (target >= 0.6x)\n",
      step->params, step->step_s * 1e3, step->pass_copy_encode_s * 1e3,
      100 * step->pass_copy_encode_s / step->step_s, step->flops, step->sgemm_flops,
      step->flops / step->sgemm_flops);
  return kExitOk;
#endif
}

}  // namespace reckon::ctl
