// The batched apply merged (issue 37 item 5): many peers' threshold
// messages applied with one add per distinct parameter instead of one
// atomic per update. The words are expanded to (index, +-step) pairs,
// radix-sorted by index (CUB), the steps of one index summed modulo 2^64
// (ReduceByKey), then each index's sum added to the replica and its float
// refreshed, without atomics.
//
// The replica ends the same as with LaunchApplyWords (additions modulo
// 2^64 commute); the count of wraps does not: it counts the indices whose
// merged sum took them past the int64 range, where the atomic apply
// counts each add that did (both are "a member sent a step no training
// makes"; for steps any training makes neither counts anything).
//
// Whether it is faster than the atomic apply is for a GPU to say:
// `reckonctl bench gpu` times both on 80 peers' Strom-size messages and
// checks they leave the same replica. The backend keeps the atomic apply:
// on an H200 (2026-12-04, docs/benchmarks.md) the merged one was 1.14x
// faster at 14.6M parameters and 0.91x at 100M.
//
// Threading: one thread; enqueues on `stream`. Plain pointers (nvcc).
#ifndef RECKON_CUDA_MERGED_APPLY_H_
#define RECKON_CUDA_MERGED_APPLY_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"

namespace reckon::cuda {

class MergedApply {
 public:
  MergedApply() = default;
  MergedApply(const MergedApply&) = delete;
  MergedApply& operator=(const MergedApply&) = delete;
  ~MergedApply();

  // As LaunchApplyWords then LaunchRefreshTouched (cuda/kernels.h): message
  // m covers words [ends[m-1], ends[m]) and moves each word's parameter by
  // +-steps[m] quanta. Device pointers; grows its scratch (a cudaMalloc,
  // which waits) when `total_words` is larger than any before.
  absl::Status Launch(const uint32_t* words, uint64_t total_words, const uint64_t* ends,
                      const int64_t* steps, int messages, int64_t* quanta, float* weights,
                      double quantum, unsigned long long* wrapped, cudaStream_t stream);

 private:
  absl::Status Reserve(uint64_t total_words, cudaStream_t stream);
  void Free();

  uint64_t capacity_ = 0;
  uint32_t* keys_in_ = nullptr;
  uint32_t* keys_out_ = nullptr;
  uint64_t* values_in_ = nullptr;
  uint64_t* values_out_ = nullptr;
  uint32_t* unique_ = nullptr;
  uint64_t* sums_ = nullptr;
  int64_t* runs_ = nullptr;
  void* temp_ = nullptr;
  size_t temp_bytes_ = 0;
};

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_MERGED_APPLY_H_
