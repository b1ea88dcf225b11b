#include "cuda/codec_kernels.h"
#include "cuda/cuda_check.h"
#include "cuda/device_elementwise.h"
#include "cuda/launch_shape.h"

namespace reckon::cuda {
namespace {

// The tensor holding flat index i (tensors are few: a linear scan).
__device__ __forceinline__ int TensorOf(const DeviceTensor* tensors, int tensor_count, uint64_t i) {
  int t = 0;
  while (t + 1 < tensor_count && tensors[t + 1].offset <= i) ++t;
  return t;
}

__global__ void AccumulateCheckedKernel(const float* __restrict__ delta,
                                        float* __restrict__ residual, uint64_t n,
                                        int32_t limit_bits, unsigned long long* first_bad) {
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += uint64_t{gridDim.x} * blockDim.x) {
    const float r = AddRn(residual[i], delta[i]);
    residual[i] = r;
    if (DenseValueRefused(r, limit_bits)) atomicMin(first_bad, static_cast<unsigned long long>(i));
  }
}

// One thread per column, over every tensor's columns.
__global__ void OneBitColumnsKernel(const float* __restrict__ residual,
                                    const DeviceTensor* __restrict__ tensors, int tensor_count,
                                    uint32_t total_columns, int fraction_bits,
                                    const unsigned long long* first_bad,
                                    float* __restrict__ column_values) {
  if (*first_bad != ~0ull) return;
  for (uint32_t g = blockIdx.x * blockDim.x + threadIdx.x; g < total_columns;
       g += gridDim.x * blockDim.x) {
    int t = 0;
    while (t + 1 < tensor_count && tensors[t + 1].column_base <= g) ++t;
    const DeviceTensor& tensor = tensors[t];
    const uint32_t c = g - tensor.column_base;
    const OneBitColumnValues v =
        OneBitColumn(residual + tensor.offset + c, tensor.rows, tensor.cols, fraction_bits);
    column_values[2 * size_t{g}] = v.plus;
    column_values[2 * size_t{g} + 1] = v.minus;
  }
}

// Whole warps walk 32-aligned groups (n rounded up), so every lane takes
// part in each ballot; lanes past n vote 0 (the padding bits).
__global__ void OneBitQuantizeKernel(float* __restrict__ residual, uint64_t n,
                                     const DeviceTensor* __restrict__ tensors, int tensor_count,
                                     const float* __restrict__ column_values, bool feedback,
                                     double quantum, const unsigned long long* first_bad,
                                     uint32_t* __restrict__ sign_words,
                                     int64_t* __restrict__ quanta) {
  if (*first_bad != ~0ull) return;
  const uint64_t padded = (n + 31) / 32 * 32;
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < padded;
       i += uint64_t{gridDim.x} * blockDim.x) {
    bool non_negative = false;
    if (i < n) {
      const DeviceTensor& tensor = tensors[TensorOf(tensors, tensor_count, i)];
      const uint64_t column = tensor.column_base + (i - tensor.offset) % tensor.cols;
      const float r = residual[i];
      non_negative = r >= 0.0f;
      const auto q = static_cast<int64_t>(column_values[2 * column + (non_negative ? 0 : 1)]);
      quanta[i] = q;
      residual[i] = feedback ? DenseFeedback(r, q, quantum) : 0.0f;
    }
    const unsigned word = __ballot_sync(0xFFFFFFFFu, non_negative);
    if ((threadIdx.x & 31) == 0) sign_words[i / 32] = word;
  }
}

// blockIdx.y: the tensor; each warp's maximum joins the tensor's by one
// atomicMax on the bits (non-negative floats order as their bits).
__global__ void AbsMaxKernel(const float* __restrict__ residual,
                             const DeviceTensor* __restrict__ tensors,
                             const unsigned long long* first_bad, uint32_t* absmax_bits) {
  if (*first_bad != ~0ull) return;
  const DeviceTensor tensor = tensors[blockIdx.y];
  const uint64_t size = uint64_t{tensor.rows} * tensor.cols;
  uint32_t best = 0;
  for (uint64_t e = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < size;
       e += uint64_t{gridDim.x} * blockDim.x) {
    const uint32_t bits = FloatBits(residual[tensor.offset + e]) & 0x7FFFFFFFu;
    best = bits > best ? bits : best;
  }
  for (int lane_offset = 16; lane_offset > 0; lane_offset >>= 1) {
    const uint32_t other = __shfl_down_sync(0xFFFFFFFFu, best, lane_offset);
    best = other > best ? other : best;
  }
  if ((threadIdx.x & 31) == 0 && best != 0) atomicMax(absmax_bits + blockIdx.y, best);
}

// blockIdx.x: the tensor; thread m: magnitude m.
__global__ void DynTreeTablesKernel(const uint32_t* __restrict__ absmax_bits, bool rescale,
                                    int fraction_bits, const uint64_t* __restrict__ fractions,
                                    const unsigned long long* first_bad, float* scales,
                                    int64_t* __restrict__ tables,
                                    double* __restrict__ to_normalized) {
  if (*first_bad != ~0ull) return;
  const int t = blockIdx.x;
  const int m = threadIdx.x;
  __shared__ float scale;
  if (m == 0) {
    if (rescale) {
      const float value =
          PayloadValue(static_cast<double>(BitsFloat(absmax_bits[t])), fraction_bits);
      constexpr float kMaxScale = 4503599627370496.0f;  // 2^52: codec::kMaxDynTreeScaleQuanta
      scales[t] = value < kMaxScale ? value : kMaxScale;
    }
    scale = scales[t];
    const auto scale_quanta = static_cast<int64_t>(scale);
    to_normalized[t] = scale_quanta > 0 ? DivRnD(static_cast<double>(uint64_t{1} << fraction_bits),
                                                 static_cast<double>(scale_quanta))
                                        : 0.0;
  }
  __syncthreads();
  // codec::DynTreeQuanta: round(scale * numerator / denominator), half up.
  const auto s = static_cast<uint64_t>(static_cast<int64_t>(scale));
  const uint64_t numerator = fractions[2 * m], denominator = fractions[2 * m + 1];
  tables[128 * t + m] = static_cast<int64_t>((2 * s * numerator + denominator) / (2 * denominator));
}

// blockIdx.y: the tensor; its table and the midpoints in shared memory.
__global__ void DynTree8EncodeKernel(float* __restrict__ residual,
                                     const DeviceTensor* __restrict__ tensors,
                                     const int64_t* __restrict__ tables,
                                     const double* __restrict__ to_normalized,
                                     const double* __restrict__ midpoints, bool feedback,
                                     double quantum, const unsigned long long* first_bad,
                                     uint8_t* __restrict__ codes, int64_t* __restrict__ quanta) {
  if (*first_bad != ~0ull) return;
  __shared__ int64_t table[128];
  __shared__ double mids[127];
  for (int k = threadIdx.x; k < 128; k += blockDim.x) table[k] = tables[128 * blockIdx.y + k];
  for (int k = threadIdx.x; k < 127; k += blockDim.x) mids[k] = midpoints[k];
  __syncthreads();
  const DeviceTensor tensor = tensors[blockIdx.y];
  const double normalize = to_normalized[blockIdx.y];
  const uint64_t size = uint64_t{tensor.rows} * tensor.cols;
  for (uint64_t e = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; e < size;
       e += uint64_t{gridDim.x} * blockDim.x) {
    const uint64_t i = tensor.offset + e;
    const float r = residual[i];
    uint8_t code = 0;
    const int64_t q = DynTree8Element(r, normalize, table, mids, &code);
    codes[i] = code;
    quanta[i] = q;
    residual[i] = feedback ? DenseFeedback(r, q, quantum) : 0.0f;
  }
}

}  // namespace

absl::Status LaunchAccumulateChecked(const float* delta, float* residual, size_t n,
                                     int fraction_bits, unsigned long long* first_bad,
                                     cudaStream_t stream) {
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(first_bad, 0xFF, sizeof(*first_bad), stream));
  if (n == 0) return absl::OkStatus();
  AccumulateCheckedKernel<<<Blocks(n), kThreads, 0, stream>>>(
      delta, residual, n, DenseLimitBits(fraction_bits), first_bad);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("AccumulateCheckedKernel");
  return absl::OkStatus();
}

absl::Status LaunchOneBitColumns(const float* residual, const DeviceTensor* tensors,
                                 int tensor_count, uint32_t total_columns, int fraction_bits,
                                 const unsigned long long* first_bad, float* column_values,
                                 cudaStream_t stream) {
  if (total_columns == 0) return absl::OkStatus();
  OneBitColumnsKernel<<<Blocks(total_columns), kThreads, 0, stream>>>(
      residual, tensors, tensor_count, total_columns, fraction_bits, first_bad, column_values);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("OneBitColumnsKernel");
  return absl::OkStatus();
}

absl::Status LaunchOneBitQuantize(float* residual, size_t n, const DeviceTensor* tensors,
                                  int tensor_count, const float* column_values, bool feedback,
                                  double quantum, const unsigned long long* first_bad,
                                  uint32_t* sign_words, int64_t* quanta, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  OneBitQuantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(residual, n, tensors, tensor_count,
                                                           column_values, feedback, quantum,
                                                           first_bad, sign_words, quanta);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("OneBitQuantizeKernel");
  return absl::OkStatus();
}

absl::Status LaunchAbsMax(const float* residual, const DeviceTensor* tensors, int tensor_count,
                          const unsigned long long* first_bad, uint32_t* absmax_bits,
                          cudaStream_t stream) {
  if (tensor_count == 0) return absl::OkStatus();
  RECKON_CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(absmax_bits, 0, sizeof(uint32_t) * tensor_count, stream));
  // Enough blocks per tensor to fill the device several times over.
  const dim3 grid(256, static_cast<unsigned>(tensor_count));
  AbsMaxKernel<<<grid, kThreads, 0, stream>>>(residual, tensors, first_bad, absmax_bits);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("AbsMaxKernel");
  return absl::OkStatus();
}

absl::Status LaunchDynTreeTables(const uint32_t* absmax_bits, int tensor_count, bool rescale,
                                 int fraction_bits, const uint64_t* fractions,
                                 const unsigned long long* first_bad, float* scales,
                                 int64_t* tables, double* to_normalized, cudaStream_t stream) {
  if (tensor_count == 0) return absl::OkStatus();
  DynTreeTablesKernel<<<tensor_count, 128, 0, stream>>>(
      absmax_bits, rescale, fraction_bits, fractions, first_bad, scales, tables, to_normalized);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("DynTreeTablesKernel");
  return absl::OkStatus();
}

absl::Status LaunchDynTree8Encode(float* residual, const DeviceTensor* tensors, int tensor_count,
                                  uint64_t largest_tensor, const int64_t* tables,
                                  const double* to_normalized, const double* midpoints,
                                  bool feedback, double quantum,
                                  const unsigned long long* first_bad, uint8_t* codes,
                                  int64_t* quanta, cudaStream_t stream) {
  if (tensor_count == 0 || largest_tensor == 0) return absl::OkStatus();
  const dim3 grid(Blocks(largest_tensor) < 4096 ? Blocks(largest_tensor) : 4096,
                  static_cast<unsigned>(tensor_count));
  DynTree8EncodeKernel<<<grid, kThreads, 0, stream>>>(residual, tensors, tables, to_normalized,
                                                      midpoints, feedback, quantum, first_bad,
                                                      codes, quanta);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("DynTree8EncodeKernel");
  return absl::OkStatus();
}

}  // namespace reckon::cuda
