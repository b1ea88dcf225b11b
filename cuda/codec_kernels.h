// The quanta codecs' encoders as kernels (onebit's column statistics and
// signs, dyntree8's abs max, scales and codes), for cuda/device_codec.h.
// Each kernel's arithmetic is a __host__ __device__ function of
// cuda/device_elementwise.h that tests/cuda_elementwise_test.cc holds to the host
// encoders (codec/onebit.cc, codec/dyntree8.cc) bit for bit; the kernels
// only lay the work out over threads, and no result depends on that layout
// (a column's sum is one thread's loop in row order; a maximum is exact in
// any order).
//
// Every launcher enqueues on `stream` and returns the launch status at once;
// pointers are device pointers. Every kernel first reads *first_bad (what
// LaunchAccumulateChecked left) and does nothing when a value was refused:
// the residual and the codec's state stay as they were.
#ifndef RECKON_CUDA_CODEC_KERNELS_H_
#define RECKON_CUDA_CODEC_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace reckon::cuda {

// One tensor of the flat vector (codec::TensorShape) with where it starts:
// its first parameter and, for onebit, its first column among all tensors'.
struct DeviceTensor {
  uint64_t offset = 0;
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint32_t column_base = 0;
};

// residual[i] += delta[i]; *first_bad = the lowest i whose sum the quanta
// codecs refuse (NaN, Inf, |r| * 2^fb >= 2^62: cuda/device_elementwise.h
// DenseValueRefused, codec::EncodeWithFeedback's check), else ~0.
absl::Status LaunchAccumulateChecked(const float* delta, float* residual, size_t n,
                                     int fraction_bits, unsigned long long* first_bad,
                                     cudaStream_t stream);

// Onebit, 1: every column's (plus, minus) payload values into
// column_values[2c], [2c + 1] (cuda/device_elementwise.h OneBitColumn), one
// thread per column.
absl::Status LaunchOneBitColumns(const float* residual, const DeviceTensor* tensors,
                                 int tensor_count, uint32_t total_columns, int fraction_bits,
                                 const unsigned long long* first_bad, float* column_values,
                                 cudaStream_t stream);
// Onebit, 2: each parameter's sign into bit i % 32 of sign_words[i / 32]
// (the words' little-endian bytes are the payload's sign bytes; bits past n
// are 0), its quanta (its column's plus or minus), and error feedback: the
// residual keeps r - quanta * quantum (cuda/device_elementwise.h DenseFeedback),
// or 0 without feedback.
absl::Status LaunchOneBitQuantize(float* residual, size_t n, const DeviceTensor* tensors,
                                  int tensor_count, const float* column_values, bool feedback,
                                  double quantum, const unsigned long long* first_bad,
                                  uint32_t* sign_words, int64_t* quanta, cudaStream_t stream);

// Dyntree8, 1 (a step that rescales): each tensor's abs max, as float bits,
// into absmax_bits[t].
absl::Status LaunchAbsMax(const float* residual, const DeviceTensor* tensors, int tensor_count,
                          const unsigned long long* first_bad, uint32_t* absmax_bits,
                          cudaStream_t stream);
// Dyntree8, 2: when `rescale`, scales[t] = min(PayloadValue(abs max), 2^52)
// (codec/dyntree8.cc Scale); then, from scales[t], the tensor's 128
// magnitudes in quanta into tables[128 t + m] (codec::DynTreeQuanta from
// `fractions`: 128 (numerator, denominator) pairs of codec::DynTreeMagnitude)
// and 2^fb / scale (0 for a zero scale) into to_normalized[t].
absl::Status LaunchDynTreeTables(const uint32_t* absmax_bits, int tensor_count, bool rescale,
                                 int fraction_bits, const uint64_t* fractions,
                                 const unsigned long long* first_bad, float* scales,
                                 int64_t* tables, double* to_normalized, cudaStream_t stream);
// Dyntree8, 3: each parameter's code and quanta (cuda/device_elementwise.h
// DynTree8Element, searching the 127 `midpoints`), then error feedback as
// onebit's.
absl::Status LaunchDynTree8Encode(float* residual, const DeviceTensor* tensors, int tensor_count,
                                  uint64_t largest_tensor, const int64_t* tables,
                                  const double* to_normalized, const double* midpoints,
                                  bool feedback, double quantum,
                                  const unsigned long long* first_bad, uint8_t* codes,
                                  int64_t* quanta, cudaStream_t stream);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_CODEC_KERNELS_H_
