#include <algorithm>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_reduce.cuh>
#include <cuda/std/functional>

#include "base/status_macros.h"
#include "cuda/cuda_check.h"
#include "cuda/device_elementwise.h"
#include "cuda/launch_shape.h"
#include "cuda/merged_apply.h"

namespace reckon::cuda {
namespace {

// Word k as (its index, its message's step with the word's sign, as the
// unsigned bits the modulo-2^64 sum adds).
__global__ void ExpandWordsKernel(const uint32_t* __restrict__ words, uint64_t total,
                                  const uint64_t* __restrict__ ends,
                                  const int64_t* __restrict__ steps, int messages,
                                  uint32_t* __restrict__ keys, uint64_t* __restrict__ values) {
  for (uint64_t k = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; k < total;
       k += uint64_t{gridDim.x} * blockDim.x) {
    const int lo = MessageOfWord(ends, messages, k);
    const uint32_t w = words[k];
    const int64_t step = (w & 0x80000000u) ? -steps[lo] : steps[lo];
    keys[k] = w & 0x7FFFFFFFu;
    values[k] = static_cast<uint64_t>(step);
  }
}

// One thread per distinct index: no two threads share a parameter.
__global__ void AddMergedKernel(const uint32_t* __restrict__ unique,
                                const uint64_t* __restrict__ sums, const int64_t* runs,
                                int64_t* __restrict__ quanta, float* __restrict__ weights,
                                double quantum, unsigned long long* wrapped) {
  const auto count = static_cast<uint64_t>(*runs);
  for (uint64_t r = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; r < count;
       r += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t i = unique[r];
    bool wraps = false;
    const int64_t q = WrappingAdd(quanta[i], static_cast<int64_t>(sums[r]), &wraps);
    quanta[i] = q;
    weights[i] = __double2float_rn(__dmul_rn(static_cast<double>(q), quantum));
    if (wraps && wrapped != nullptr) atomicAdd(wrapped, 1ull);
  }
}

}  // namespace

MergedApply::~MergedApply() { Free(); }

void MergedApply::Free() {
  for (void* p :
       {static_cast<void*>(keys_in_), static_cast<void*>(keys_out_), static_cast<void*>(values_in_),
        static_cast<void*>(values_out_), static_cast<void*>(unique_), static_cast<void*>(sums_),
        static_cast<void*>(runs_), temp_}) {
    cudaFree(p);
  }
  keys_in_ = keys_out_ = unique_ = nullptr;
  values_in_ = values_out_ = sums_ = nullptr;
  runs_ = nullptr;
  temp_ = nullptr;
  temp_bytes_ = 0;
  capacity_ = 0;
}

absl::Status MergedApply::Reserve(uint64_t total_words, cudaStream_t stream) {
  if (total_words <= capacity_) return absl::OkStatus();
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // nothing uses the old scratch
  Free();
  const uint64_t n = total_words;
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&keys_in_, n * sizeof(uint32_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&keys_out_, n * sizeof(uint32_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&values_in_, n * sizeof(uint64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&values_out_, n * sizeof(uint64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&unique_, n * sizeof(uint32_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&sums_, n * sizeof(uint64_t)));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&runs_, sizeof(int64_t)));
  size_t sort_bytes = 0, reduce_bytes = 0;
  RECKON_CUDA_RETURN_IF_ERROR(
      cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, keys_in_, keys_out_, values_in_,
                                      values_out_, static_cast<int64_t>(n), 0, 31, stream));
  RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceReduce::ReduceByKey(
      nullptr, reduce_bytes, keys_out_, unique_, values_out_, sums_, runs_,
      ::cuda::std::plus<uint64_t>(), static_cast<int64_t>(n), stream));
  temp_bytes_ = std::max<size_t>({sort_bytes, reduce_bytes, 1});
  RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&temp_, temp_bytes_));
  capacity_ = n;
  return absl::OkStatus();
}

absl::Status MergedApply::Launch(const uint32_t* words, uint64_t total_words, const uint64_t* ends,
                                 const int64_t* steps, int messages, int64_t* quanta,
                                 float* weights, double quantum, unsigned long long* wrapped,
                                 cudaStream_t stream) {
  if (total_words == 0 || messages == 0) return absl::OkStatus();
  RECKON_RETURN_IF_ERROR(Reserve(total_words, stream));
  const auto n = static_cast<int64_t>(total_words);
  ExpandWordsKernel<<<Blocks(total_words), kThreads, 0, stream>>>(words, total_words, ends, steps,
                                                                  messages, keys_in_, values_in_);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("ExpandWordsKernel");
  size_t bytes = temp_bytes_;
  RECKON_CUDA_RETURN_IF_ERROR(cub::DeviceRadixSort::SortPairs(
      temp_, bytes, keys_in_, keys_out_, values_in_, values_out_, n, 0, 31, stream));
  bytes = temp_bytes_;
  RECKON_CUDA_RETURN_IF_ERROR(
      cub::DeviceReduce::ReduceByKey(temp_, bytes, keys_out_, unique_, values_out_, sums_, runs_,
                                     ::cuda::std::plus<uint64_t>(), n, stream));
  AddMergedKernel<<<Blocks(total_words), kThreads, 0, stream>>>(unique_, sums_, runs_, quanta,
                                                                weights, quantum, wrapped);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("AddMergedKernel");
  return absl::OkStatus();
}

}  // namespace reckon::cuda
