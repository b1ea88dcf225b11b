#include <algorithm>
#include <cfloat>
#include <climits>
#include <cmath>

#include "cuda/cuda_check.h"
#include "cuda/device_elementwise.h"
#include "cuda/kernels.h"
#include "cuda/launch_shape.h"

namespace reckon::cuda {
namespace {

// Grid-stride loop over [0, n).
#define RECKON_FOR_EACH(i, n)                                                 \
  for (uint64_t i = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (n); \
       i += uint64_t{gridDim.x} * blockDim.x)

__device__ __forceinline__ float Sigmoid(float z) {
  // The CPU's T(1) / (T(1) + std::exp(-z)); expf is not correctly rounded.
  return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}

__global__ void BiasActivationKernel(const float* __restrict__ bias, float* __restrict__ pre,
                                     float* __restrict__ post, uint64_t n, int cols,
                                     int activation) {
  RECKON_FOR_EACH(i, n) {
    const float z = __fadd_rn(pre[i], bias[i % cols]);
    pre[i] = z;
    if (activation == 1) post[i] = z > 0.0f ? z : 0.0f;
    if (activation == 2) post[i] = Sigmoid(z);
  }
}

// One thread per row: the CPU's loop, in its order.
__global__ void SoftmaxKernel(const float* __restrict__ z, const int32_t* __restrict__ labels,
                              int rows, int classes, float inv_batch, float* __restrict__ probs,
                              float* __restrict__ delta, float* __restrict__ row_loss,
                              int32_t* __restrict__ row_correct) {
  RECKON_FOR_EACH(r, uint64_t(rows)) {
    const float* zr = z + r * classes;
    float* pr = probs + r * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (zr[c] > zr[best]) best = c;  // first maximum, as std::max_element
    }
    const float max = zr[best];
    float sum = 0.0f;
    for (int c = 0; c < classes; ++c) {
      const float e = expf(__fsub_rn(zr[c], max));
      pr[c] = e;
      sum = __fadd_rn(sum, e);
    }
    for (int c = 0; c < classes; ++c) pr[c] = __fdiv_rn(pr[c], sum);
    const int label = labels[r];
    row_loss[r] = __fsub_rn(logf(sum), __fsub_rn(zr[label], max));
    row_correct[r] = best == label ? 1 : 0;
    if (delta != nullptr) {
      float* dr = delta + r * classes;
      for (int c = 0; c < classes; ++c) {
        dr[c] = __fmul_rn(__fsub_rn(pr[c], c == label ? 1.0f : 0.0f), inv_batch);
      }
    }
  }
}

// The bias gradient, one thread a column, its rows added in order (the
// CPU backend's loop: every device run since 2026-11-27 ends with the same
// weights). A column's sum is a chain of dependent adds no two threads can
// share without changing its bits; what the kernel can change is how long
// each add waits for its load. Nsight Compute (2026-12-04, docs/benchmarks.md
// "The profile of Strom's step") put the kernel at 12.8% of Strom's step:
// blocks of kThreads put the 1,800 columns' 57 warps on 8 of the H200's 132
// multiprocessors, each warp with few loads in flight. Now a block is one
// warp (57 multiprocessors, each with its own load units and L1), and each
// thread issues kBiasRowsAhead rows' loads before it adds them, in order.
// Not yet timed on a GPU (the device run's ncu step measures it).
constexpr int kBiasThreads = 32;
constexpr int kBiasRowsAhead = 16;

__global__ void BiasGradientKernel(const float* __restrict__ d, int rows, int cols,
                                   float* __restrict__ db) {
  RECKON_FOR_EACH(c, uint64_t(cols)) {
    const float* column = d + c;
    float sum = 0.0f;
    int r = 0;
    for (; r + kBiasRowsAhead <= rows; r += kBiasRowsAhead) {
      float ahead[kBiasRowsAhead];
#pragma unroll
      for (int k = 0; k < kBiasRowsAhead; ++k) ahead[k] = column[uint64_t(r + k) * cols];
#pragma unroll
      for (int k = 0; k < kBiasRowsAhead; ++k) sum = __fadd_rn(sum, ahead[k]);
    }
    for (; r < rows; ++r) sum = __fadd_rn(sum, column[uint64_t(r) * cols]);
    db[c] = sum;
  }
}

__global__ void ActivationBackwardKernel(const float* __restrict__ pre,
                                         const float* __restrict__ post, float* __restrict__ d,
                                         uint64_t n, int activation) {
  RECKON_FOR_EACH(i, n) {
    if (activation == 1) {
      d[i] = pre[i] > 0.0f ? d[i] : 0.0f;
    } else {
      // The CPU's dp[i] *= a * (1 - a): (a * (1 - a)) first, then the product.
      d[i] = __fmul_rn(d[i], __fmul_rn(post[i], __fsub_rn(1.0f, post[i])));
    }
  }
}

__global__ void OptimizerKernel(OptimizerRule rule, const float* __restrict__ weights,
                                float* __restrict__ state, float* __restrict__ g_io, uint64_t n,
                                PeerMovement peers) {
  RECKON_FOR_EACH(i, n) {
    const float g = WithWeightDecay(rule, g_io[i], rule.weight_decay != 0.0f ? weights[i] : 0.0f);
    float s = rule.kind != 0 ? state[i] : 0.0f;
    g_io[i] = peers.quanta != nullptr
                  ? AdagradAggregateDelta(
                        rule, g, PeerStep(peers.quanta[i], peers.after_own[i], peers.quantum), &s)
                  : OptimizerDelta(rule, g, &s);
    if (rule.kind != 0) state[i] = s;
  }
}

__global__ void AccumulateKernel(const float* __restrict__ delta, float* __restrict__ residual,
                                 uint64_t n) {
  RECKON_FOR_EACH(i, n) residual[i] = __fadd_rn(residual[i], delta[i]);
}

__device__ __forceinline__ float QuantaToFloat(int64_t q, double quantum) {
  return __double2float_rn(__dmul_rn(static_cast<double>(q), quantum));
}

__global__ void RefreshWeightsKernel(const int64_t* __restrict__ quanta,
                                     float* __restrict__ weights, uint64_t n, double quantum) {
  RECKON_FOR_EACH(i, n) weights[i] = QuantaToFloat(quanta[i], quantum);
}

__global__ void AddDenseKernel(const int64_t* __restrict__ delta, int64_t* __restrict__ quanta,
                               uint64_t n, unsigned long long* wrapped) {
  RECKON_FOR_EACH(i, n) {
    bool wraps;
    quanta[i] = WrappingAdd(quanta[i], delta[i], &wraps);
    if (wraps && wrapped != nullptr) atomicAdd(wrapped, 1ull);
  }
}

__global__ void ApplyWordsKernel(const uint32_t* __restrict__ words, uint64_t total,
                                 const uint64_t* __restrict__ ends,
                                 const int64_t* __restrict__ steps, int messages, int64_t* quanta,
                                 unsigned long long* wrapped) {
  RECKON_FOR_EACH(k, total) {
    const int lo = MessageOfWord(ends, messages, k);
    const uint32_t w = words[k];
    const uint32_t i = w & 0x7FFFFFFFu;
    int64_t step = steps[lo];
    if (w & 0x80000000u) step = -step;
    const unsigned long long before = atomicAdd(reinterpret_cast<unsigned long long*>(quanta + i),
                                                static_cast<unsigned long long>(step));
    bool wraps;
    WrappingAdd(static_cast<int64_t>(before), step, &wraps);
    if (wraps && wrapped != nullptr) atomicAdd(wrapped, 1ull);
  }
}

__global__ void RefreshTouchedKernel(const uint32_t* __restrict__ words, uint64_t total,
                                     const int64_t* __restrict__ quanta,
                                     float* __restrict__ weights, double quantum) {
  RECKON_FOR_EACH(k, total) {
    const uint32_t i = words[k] & 0x7FFFFFFFu;
    weights[i] = QuantaToFloat(quanta[i], quantum);
  }
}

// The dense codec applied locally, phase 1: residual += delta, and the
// lowest index whose value the codec refuses (its payload limit, NaN, Inf).
__global__ void DenseAccumulateCheckKernel(const float* __restrict__ delta,
                                           float* __restrict__ residual, uint64_t n,
                                           int32_t limit_bits, unsigned long long* first_bad) {
  RECKON_FOR_EACH(i, n) {
    const float r = AddRn(residual[i], delta[i]);
    residual[i] = r;
    if (DenseValueRefused(r, limit_bits)) {
      atomicMin(first_bad, static_cast<unsigned long long>(i));
    }
  }
}

// Phase 2, only when phase 1 refused nothing: the quanta into the replica
// (modulo 2^64), their value out of the residual, the float copy refreshed.
__global__ void DenseApplyLocalKernel(float* __restrict__ residual, int64_t* __restrict__ quanta,
                                      float* __restrict__ weights, uint64_t n, int fraction_bits,
                                      double quantum, const unsigned long long* first_bad) {
  if (*first_bad != ~0ull) return;
  RECKON_FOR_EACH(i, n) {
    const float r = residual[i];
    const int64_t q = DenseQuanta(r, fraction_bits);
    residual[i] = DenseFeedback(r, q, quantum);
    const int64_t sum = static_cast<int64_t>(static_cast<unsigned long long>(quanta[i]) +
                                             static_cast<unsigned long long>(q));
    quanta[i] = sum;
    weights[i] = QuantaToFloat(sum, quantum);
  }
}

// delta = params - replica (float32, rounded to nearest: the host's
// `params[i] - replica[i]`), and the lowest index of a parameter that is
// NaN or Inf.
__global__ void FlatDifferenceKernel(const float* __restrict__ params,
                                     const float* __restrict__ replica, float* __restrict__ delta,
                                     uint64_t n, unsigned long long* first_bad) {
  RECKON_FOR_EACH(i, n) {
    const float p = params[i];
    if (!isfinite(p)) atomicMin(first_bad, static_cast<unsigned long long>(i));
    delta[i] = __fsub_rn(p, replica[i]);
  }
}

#undef RECKON_FOR_EACH

}  // namespace

absl::Status LaunchDenseApplyLocal(const float* delta, float* residual, int64_t* quanta,
                                   float* weights, size_t n, int fraction_bits,
                                   unsigned long long* first_bad, cudaStream_t stream) {
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(first_bad, 0xFF, sizeof(*first_bad), stream));
  if (n == 0) return absl::OkStatus();
  DenseAccumulateCheckKernel<<<Blocks(n), kThreads, 0, stream>>>(
      delta, residual, n, DenseLimitBits(fraction_bits), first_bad);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("DenseAccumulateCheckKernel");
  DenseApplyLocalKernel<<<Blocks(n), kThreads, 0, stream>>>(
      residual, quanta, weights, n, fraction_bits, std::ldexp(1.0, -fraction_bits), first_bad);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("DenseApplyLocalKernel");
  return absl::OkStatus();
}

absl::Status LaunchFlatDifference(const float* params, const float* replica, float* delta, size_t n,
                                  unsigned long long* first_bad, cudaStream_t stream) {
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(first_bad, 0xFF, sizeof(*first_bad), stream));
  if (n == 0) return absl::OkStatus();
  FlatDifferenceKernel<<<Blocks(n), kThreads, 0, stream>>>(params, replica, delta, n, first_bad);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("FlatDifferenceKernel");
  return absl::OkStatus();
}

absl::Status LaunchBiasActivation(const float* bias, float* pre, float* post, int rows, int cols,
                                  int activation, cudaStream_t stream) {
  const uint64_t n = uint64_t(rows) * cols;
  if (n == 0) return absl::OkStatus();
  BiasActivationKernel<<<Blocks(n), kThreads, 0, stream>>>(bias, pre, post, n, cols, activation);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("BiasActivationKernel");
  return absl::OkStatus();
}

absl::Status LaunchSoftmaxCrossEntropy(const float* z, const int32_t* labels, int rows, int classes,
                                       float inv_batch, float* probs, float* delta, float* row_loss,
                                       int32_t* row_correct, cudaStream_t stream) {
  if (rows == 0) return absl::OkStatus();
  SoftmaxKernel<<<Blocks(rows), kThreads, 0, stream>>>(z, labels, rows, classes, inv_batch, probs,
                                                       delta, row_loss, row_correct);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("SoftmaxKernel");
  return absl::OkStatus();
}

absl::Status LaunchBiasGradient(const float* d, int rows, int cols, float* db,
                                cudaStream_t stream) {
  if (cols == 0) return absl::OkStatus();
  const uint64_t blocks = (uint64_t(cols) + kBiasThreads - 1) / kBiasThreads;
  BiasGradientKernel<<<unsigned(std::min<uint64_t>(blocks, kMaxBlocks)), kBiasThreads, 0, stream>>>(
      d, rows, cols, db);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("BiasGradientKernel");
  return absl::OkStatus();
}

absl::Status LaunchActivationBackward(const float* pre, const float* post, float* d, size_t n,
                                      int activation, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  ActivationBackwardKernel<<<Blocks(n), kThreads, 0, stream>>>(pre, post, d, n, activation);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("ActivationBackwardKernel");
  return absl::OkStatus();
}

absl::Status LaunchOptimizerDelta(const OptimizerRule& rule, const float* weights, float* state,
                                  float* grad_to_delta, size_t n, cudaStream_t stream,
                                  const PeerMovement& peers) {
  if (n == 0) return absl::OkStatus();
  if (peers.quanta != nullptr && (rule.kind != 2 || peers.after_own == nullptr)) {
    return absl::InvalidArgumentError("the peers' movement is AdaGrad's on the aggregate only");
  }
  OptimizerKernel<<<Blocks(n), kThreads, 0, stream>>>(rule, weights, state, grad_to_delta, n,
                                                      peers);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("OptimizerKernel");
  return absl::OkStatus();
}

absl::Status LaunchAccumulate(const float* delta, float* residual, size_t n, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  AccumulateKernel<<<Blocks(n), kThreads, 0, stream>>>(delta, residual, n);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("AccumulateKernel");
  return absl::OkStatus();
}

absl::Status LaunchRefreshWeights(const int64_t* quanta, float* weights, size_t n, double quantum,
                                  cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  RefreshWeightsKernel<<<Blocks(n), kThreads, 0, stream>>>(quanta, weights, n, quantum);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("RefreshWeightsKernel");
  return absl::OkStatus();
}

absl::Status LaunchAddDense(const int64_t* delta, int64_t* quanta, size_t n,
                            unsigned long long* wrapped, cudaStream_t stream) {
  if (n == 0) return absl::OkStatus();
  AddDenseKernel<<<Blocks(n), kThreads, 0, stream>>>(delta, quanta, n, wrapped);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("AddDenseKernel");
  return absl::OkStatus();
}

absl::Status LaunchApplyWords(const uint32_t* words, uint64_t total_words, const uint64_t* ends,
                              const int64_t* steps, int messages, int64_t* quanta,
                              unsigned long long* wrapped, cudaStream_t stream) {
  if (total_words == 0 || messages == 0) return absl::OkStatus();
  ApplyWordsKernel<<<Blocks(total_words), kThreads, 0, stream>>>(words, total_words, ends, steps,
                                                                 messages, quanta, wrapped);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("ApplyWordsKernel");
  return absl::OkStatus();
}

absl::Status LaunchRefreshTouched(const uint32_t* words, uint64_t total_words,
                                  const int64_t* quanta, float* weights, double quantum,
                                  cudaStream_t stream) {
  if (total_words == 0) return absl::OkStatus();
  RefreshTouchedKernel<<<Blocks(total_words), kThreads, 0, stream>>>(words, total_words, quanta,
                                                                     weights, quantum);
  RECKON_CUDA_RETURN_IF_LAUNCH_FAILED("RefreshTouchedKernel");
  return absl::OkStatus();
}

}  // namespace reckon::cuda
