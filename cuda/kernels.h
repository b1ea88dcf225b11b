// The CUDA backend's elementwise kernels: the training step around the
// cuBLAS GEMMs, the optimizers, dense-mode rounding and the batched apply.
// Each has a CPU twin (cpu/mlp_math.cc, model/optimizer.cc,
// cpu/cpu_backend.cc, codec/fixed_point.cc); tests/cuda_backend_test.cc
// runs them through the backend against the CPU backend (a step, dense
// mode, the batched apply, a Fashion-MNIST run). The contract:
//   bit-exact: optimizer deltas, dense rounding, apply and the weight
//     refresh, bias gradients, activations (IEEE _rn intrinsics, no
//     contraction, the CPU's operation order);
//   within a stated relative error: softmax and loss (expf/logf are not
//     correctly rounded on either side).
//
// Every launcher enqueues on `stream`, returns the launch status at once and
// takes device pointers unless a name says h_. Row-major matrices, as on
// the CPU. Plain pointers and C++17 only: nvcc compiles this header.
//
// Threads: the launchers, any host thread, on the stream given. Errors: a
// launch that fails, or sizes past the kernels' range (kInvalidArgument),
// returned at once, named.
#ifndef RECKON_CUDA_KERNELS_H_
#define RECKON_CUDA_KERNELS_H_

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "cuda/device_elementwise.h"

namespace reckon::cuda {

// pre[r][c] += bias[c] (after a GEMM with beta = 0); then post = relu(pre)
// or sigmoid(pre) when `activation` is 1 (relu) or 2 (sigmoid); 0 leaves
// post alone (the output layer, whose softmax follows).
absl::Status LaunchBiasActivation(const float* bias, float* pre, float* post, int rows, int cols,
                                  int activation, cudaStream_t stream);

// Row-wise softmax of z into probs, and per row: -log p(label) into
// row_loss and (argmax == label) into row_correct. When delta is not null
// it receives (probs - onehot(label)) * inv_batch, the output layer's dL/dz
// for the mean loss. Labels outside [0, classes) are the caller's to reject.
absl::Status LaunchSoftmaxCrossEntropy(const float* z, const int32_t* labels, int rows, int classes,
                                       float inv_batch, float* probs, float* delta, float* row_loss,
                                       int32_t* row_correct, cudaStream_t stream);

// db[c] = sum over r (in order r = 0, 1, ...) of d[r][c].
absl::Status LaunchBiasGradient(const float* d, int rows, int cols, float* db, cudaStream_t stream);

// d[i] *= activation'(pre[i]) (relu: pre > 0 ? d : 0; sigmoid: d * post
// * (1 - post)), for the layer below the one whose delta was propagated.
absl::Status LaunchActivationBackward(const float* pre, const float* post, float* d, size_t n,
                                      int activation, cudaStream_t stream);

// The optimizer's delta, in place of the gradient (model::AccumulateDelta
// without the final residual add; cuda/device_elementwise.h OptimizerDelta):
//   g = grad + weight_decay * weights   (weights only read when wd != 0)
//   kind 0 sgd:      delta = -lr g
//   kind 1 momentum: v = momentum v - lr g; delta = v
//   kind 2 adagrad:  h += g^2; delta = -lr g / (sqrt(h) + eps)
//   with `peers` (AdaGrad on the aggregate: kind 2 only, else
//   kInvalidArgument): AdagradAggregateDelta with each weight's PeerStep
// The threshold mode fuses this into the pass (ThresholdPass::LaunchFused);
// the quanta codecs and the benchmark's unfused baseline use it.
absl::Status LaunchOptimizerDelta(const OptimizerRule& rule, const float* weights, float* state,
                                  float* grad_to_delta, size_t n, cudaStream_t stream,
                                  const PeerMovement& peers = {});

// residual[i] += delta[i] (the quanta codecs' accumulate; threshold mode's
// is fused into the threshold pass).
absl::Status LaunchAccumulate(const float* delta, float* residual, size_t n, cudaStream_t stream);

// weights[i] = (float)((double)quanta[i] * quantum) for every i.
absl::Status LaunchRefreshWeights(const int64_t* quanta, float* weights, size_t n, double quantum,
                                  cudaStream_t stream);

// quanta[i] += delta[i] modulo 2^64, as every replica adds
// (codec/fixed_point.h Apply). *wrapped (when not null) counts the
// additions that left the int64 range (cuda/device_elementwise.h WrappingAdd).
absl::Status LaunchAddDense(const int64_t* delta, int64_t* quanta, size_t n,
                            unsigned long long* wrapped, cudaStream_t stream);

// The batched apply: message m covers words [ends[m-1], ends[m]) (ends[-1]
// = 0) and moves each word's parameter by +-steps[m] quanta (sign bit set:
// minus), modulo 2^64 as every replica adds (codec/fixed_point.h Apply).
// Words of different messages may touch the same parameter: the adds are
// atomic and wrap, so the sum does not depend on the order. The float copy
// is not touched: LaunchRefreshTouched follows. *wrapped (when not null)
// counts the additions that left the int64 range, each against the value
// its atomic found (so the count, like the CPU's, depends on the order).
absl::Status LaunchApplyWords(const uint32_t* words, uint64_t total_words, const uint64_t* ends,
                              const int64_t* steps, int messages, int64_t* quanta,
                              unsigned long long* wrapped, cudaStream_t stream);

// weights[i] = (float)((double)quanta[i] * quantum) for every word's index.
absl::Status LaunchRefreshTouched(const uint32_t* words, uint64_t total_words,
                                  const int64_t* quanta, float* weights, double quantum,
                                  cudaStream_t stream);

// A dense fp32 step applied to this replica alone (pre-training: its
// emission goes nowhere else), bit for bit what TrainStep's codec path
// (codec::EncodeWithFeedback with CODEC_DENSE_FP32 and error feedback) and
// ApplyDense of its quanta leave, without the residual crossing to the
// host: residual += delta; then, unless some value is refused (its index,
// the lowest, into *first_bad, else ~0: the caller reads it and reports;
// the residual then holds R + delta and the replica is untouched, as on
// the CPU), q = the dense codec's quanta of the residual, the residual
// keeps what q does not carry, quanta += q modulo 2^64, weights refreshed.
// cuda/device_elementwise.h holds the per-element rules.
absl::Status LaunchDenseApplyLocal(const float* delta, float* residual, int64_t* quanta,
                                   float* weights, size_t n, int fraction_bits,
                                   unsigned long long* first_bad, cudaStream_t stream);

// A framework's step as a delta for the threshold pass (the flat replica,
// cuda/cuda_flat_replica.h): delta[i] = params[i] - replica[i] in float32, the
// host's arithmetic; *first_bad = the lowest i whose params[i] is NaN or
// Inf, else ~0 (the caller reads it before the residual takes the delta).
absl::Status LaunchFlatDifference(const float* params, const float* replica, float* delta, size_t n,
                                  unsigned long long* first_bad, cudaStream_t stream);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_KERNELS_H_
