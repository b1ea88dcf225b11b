// What the parts of `reckonctl bench gpu` (bench_gpu.cc, bench_gpu_codecs.cc)
// share: device memory freed on scope exit, Strom's network, and each
// part's measurement. Only where nvcc built reckon_cuda (RECKON_HAVE_CUDA).
//
// Threads: the bench's one thread. Errors: a CUDA call's failure, named.
#ifndef RECKON_CTL_BENCH_GPU_H_
#define RECKON_CTL_BENCH_GPU_H_

#if RECKON_HAVE_CUDA
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::ctl::gpu_bench {

template <typename T>
struct DeviceMemory {
  T* ptr = nullptr;
  ~DeviceMemory() { cudaFree(ptr); }
};

// Strom's network (784-1800x5-10, sigmoid, 14.6M parameters).
inline constexpr char kStromLayers[] = "784,1800,1800,1800,1800,1800,10";

// Onebit and dyntree8 in the codec mode at Strom's size: encoded on the
// device (cuda/device_codec.h) against what the backend did before, the
// residual copied to pinned memory, encoded on the host
// (codec::EncodeWithFeedback, one thread) and copied back. Wall time of a
// whole encode (the best of `reps`), both ending with the message and its
// quanta on the host.
struct CodecRow {
  std::string codec;
  double device_s = 0, host_s = 0;
};
absl::StatusOr<std::vector<CodecRow>> MeasureCodecs(int reps);

}  // namespace reckon::ctl::gpu_bench

#endif  // RECKON_HAVE_CUDA
#endif  // RECKON_CTL_BENCH_GPU_H_
