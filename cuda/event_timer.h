// Best-of-N timing of GPU work with CUDA events, for the benchmarks
// (`reckonctl bench gpu`). Plain C++17: nvcc includes it too.
//
// Threads: one thread's at a time, on the stream given. Errors: a CUDA
// error, returned as cuda_check.h words it.
#ifndef RECKON_CUDA_EVENT_TIMER_H_
#define RECKON_CUDA_EVENT_TIMER_H_

#include <cuda_runtime.h>

#include <algorithm>

#include "absl/status/statusor.h"
#include "base/status_macros.h"
#include "cuda/cuda_check.h"

namespace reckon::cuda {

// The best seconds of `reps` runs of `fn` (returns absl::Status; enqueues
// on the default stream); `before` (returns absl::Status) runs untimed
// ahead of each run.
template <typename Before, typename Fn>
absl::StatusOr<double> BestEventSeconds(int reps, Before before, Fn fn) {
  cudaEvent_t start = nullptr, stop = nullptr;
  auto run = [&]() -> absl::StatusOr<double> {
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
    RECKON_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
      RECKON_RETURN_IF_ERROR(before());
      RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(start));
      RECKON_RETURN_IF_ERROR(fn());
      RECKON_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop));
      RECKON_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
      float ms = 0;
      RECKON_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
      best = std::min(best, ms / 1e3);
    }
    return best;
  };
  absl::StatusOr<double> seconds = run();
  if (start != nullptr) cudaEventDestroy(start);
  if (stop != nullptr) cudaEventDestroy(stop);
  return seconds;
}

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_EVENT_TIMER_H_
