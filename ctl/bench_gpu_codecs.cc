// `reckonctl bench gpu`'s codec rows (bench_gpu.h MeasureCodecs).
#include "ctl/bench_gpu.h"

#if RECKON_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <memory>
#include <random>
#include <span>

#include "base/status_macros.h"
#include "codec/codec.h"
#include "cuda/cuda_check.h"
#include "cuda/device_codec.h"
#include "cuda/kernels.h"
#include "model/model.h"

namespace reckon::ctl::gpu_bench {

absl::StatusOr<std::vector<CodecRow>> MeasureCodecs(int reps) {
  absl::StatusOr<model::ModelShape> shape = model::ModelShape::Parse(kStromLayers, "sigmoid");
  if (!shape.ok()) return shape.status();
  const uint64_t n = shape->param_count();
  std::vector<float> delta(n);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  for (float& d : delta) d = normal(rng);
  DeviceMemory<float> d_delta, d_residual;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_delta.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&d_residual.ptr, n * sizeof(float)));
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemcpy(d_delta.ptr, delta.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  float* h_residual = nullptr;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMallocHost(&h_residual, n * sizeof(float)));
  std::unique_ptr<float, decltype(&cudaFreeHost)> h_owner(h_residual, cudaFreeHost);
  using Clock = std::chrono::steady_clock;
  std::vector<CodecRow> rows;
  for (const v1::Codec id : {v1::CODEC_ONEBIT, v1::CODEC_DYNTREE8}) {
    codec::CodecOptions options;
    options.codec = id;
    options.layout = shape->Layout();
    options.fraction_bits = 32;
    CodecRow row;
    row.codec = codec::CodecFlagName(id);
    absl::StatusOr<std::unique_ptr<cuda::DeviceCodec>> device =
        cuda::MakeDeviceCodec(options, nullptr);
    if (!device.ok()) return device.status();
    absl::StatusOr<std::unique_ptr<codec::Codec>> host = codec::MakeCodec(options);
    if (!host.ok()) return host.status();
    v1::Update msg;
    std::vector<int64_t> quanta;
    RECKON_CUDA_RETURN_IF_ERROR(cudaMemset(d_residual.ptr, 0, n * sizeof(float)));
    double best_device = 1e30, best_host = 1e30;
    for (int r = 0; r < reps + 1; ++r) {  // one warm-up
      const auto t0 = Clock::now();
      RECKON_RETURN_IF_ERROR((*device)->Encode(d_delta.ptr, d_residual.ptr, n, &msg, &quanta));
      if (r > 0)
        best_device =
            std::min(best_device, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    for (int r = 0; r < reps + 1; ++r) {
      const auto t0 = Clock::now();
      RECKON_RETURN_IF_ERROR(cuda::LaunchAccumulate(d_delta.ptr, d_residual.ptr, n, nullptr));
      RECKON_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(h_residual, d_residual.ptr, n * sizeof(float), cudaMemcpyDeviceToHost));
      RECKON_RETURN_IF_ERROR(codec::EncodeWithFeedback(
          **host, options, std::span<float>(h_residual, n), &msg, &quanta));
      RECKON_CUDA_RETURN_IF_ERROR(
          cudaMemcpy(d_residual.ptr, h_residual, n * sizeof(float), cudaMemcpyHostToDevice));
      if (r > 0)
        best_host = std::min(best_host, std::chrono::duration<double>(Clock::now() - t0).count());
    }
    row.device_s = best_device;
    row.host_s = best_host;
    rows.push_back(row);
  }
  return rows;
}

}  // namespace reckon::ctl::gpu_bench

#endif  // RECKON_HAVE_CUDA
