// The CUDA backend's per-element arithmetic, as __host__ __device__
// functions: the kernels call them on the device, and the CPU suite
// (tests/cuda_elementwise_test.cc, built with or without nvcc) checks them
// bit for bit against the CPU backend's own code (model::AccumulateDelta,
// codec::QuantizeResidual), so that a mistake in the arithmetic is caught
// on a machine without a GPU.
//
// Bit-exactness: on the device every operation is an IEEE _rn intrinsic
// (nvcc may not contract them into FMAs); on the host they are plain float
// operations in the same order, which x86-64 without -mfma does not
// contract either (the CPU backend relies on the same).
//
// Plain C++17 and no CUDA headers without nvcc: this header compiles in
// every build.
#ifndef RECKON_CUDA_ELEMENTWISE_H_
#define RECKON_CUDA_ELEMENTWISE_H_

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define RECKON_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define RECKON_HOST_DEVICE inline
#endif

namespace reckon::cuda {

#if defined(__CUDA_ARCH__)
RECKON_HOST_DEVICE float AddRn(float a, float b) { return __fadd_rn(a, b); }
RECKON_HOST_DEVICE float SubRn(float a, float b) { return __fsub_rn(a, b); }
RECKON_HOST_DEVICE float MulRn(float a, float b) { return __fmul_rn(a, b); }
RECKON_HOST_DEVICE float DivRn(float a, float b) { return __fdiv_rn(a, b); }
RECKON_HOST_DEVICE float SqrtRn(float a) { return __fsqrt_rn(a); }
RECKON_HOST_DEVICE bool IsFinite(float a) { return isfinite(a); }
#else
RECKON_HOST_DEVICE float AddRn(float a, float b) { return a + b; }
RECKON_HOST_DEVICE float SubRn(float a, float b) { return a - b; }
RECKON_HOST_DEVICE float MulRn(float a, float b) { return a * b; }
RECKON_HOST_DEVICE float DivRn(float a, float b) { return a / b; }
RECKON_HOST_DEVICE float SqrtRn(float a) { return std::sqrt(a); }
RECKON_HOST_DEVICE bool IsFinite(float a) { return std::isfinite(a); }
#endif

// The optimizer rules of model::AccumulateDelta (local placement), one
// element: the change the optimizer makes, `state` (momentum's v,
// AdaGrad's h) updated in place. `grad` already holds weight decay when
// there is any (WithWeightDecay). kind: 0 sgd, 1 momentum, 2 adagrad.
struct OptimizerRule {
  int kind = 0;
  float lr = 0, momentum = 0, eps = 0, weight_decay = 0;
};

RECKON_HOST_DEVICE float WithWeightDecay(const OptimizerRule& rule, float grad, float weight) {
  return rule.weight_decay != 0.0f ? AddRn(grad, MulRn(rule.weight_decay, weight)) : grad;
}

RECKON_HOST_DEVICE float OptimizerDelta(const OptimizerRule& rule, float g, float* state) {
  if (rule.kind == 0) return MulRn(-rule.lr, g);
  if (rule.kind == 1) {
    const float v = SubRn(MulRn(rule.momentum, *state), MulRn(rule.lr, g));
    *state = v;
    return v;
  }
  const float h = AddRn(*state, MulRn(g, g));
  *state = h;
  return DivRn(MulRn(-rule.lr, g), AddRn(SqrtRn(h), rule.eps));
}

// Strom's rule on one accumulated residual value, as
// codec::QuantizeResidual: r >= tau emits +1 and leaves r - tau, r <= -tau
// emits -1 and leaves r + tau, otherwise 0 and r. A non-finite r emits
// nothing here (2: the caller records the index and emits nothing at all).
inline constexpr int kThresholdNonFinite = 2;
RECKON_HOST_DEVICE int ThresholdElement(float r, float tau, float* out) {
  if (!IsFinite(r)) {
    *out = r;
    return kThresholdNonFinite;
  }
  if (r >= tau) {
    *out = SubRn(r, tau);
    return 1;
  }
  if (r <= -tau) {
    *out = AddRn(r, tau);
    return -1;
  }
  *out = r;
  return 0;
}

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_ELEMENTWISE_H_
