// The CUDA backend's per-element arithmetic, as __host__ __device__
// functions: the kernels call them on the device, and the CPU suite
// (tests/cuda_elementwise_test.cc, built with or without nvcc) checks them
// bit for bit against the CPU backend's own code (model::AccumulateDelta,
// codec::QuantizeResidual, the onebit and dyntree8 encoders), so that a
// mistake in the arithmetic is caught on a machine without a GPU.
//
// Bit-exactness: on the device every operation is an IEEE _rn intrinsic
// (nvcc may not contract them into FMAs); on the host they are plain float
// operations in the same order, which x86-64 without -mfma does not
// contract either (the CPU backend relies on the same).
//
// Plain C++17 and no CUDA headers without nvcc: this header compiles in
// every build.
//
// Threads: device functions over the element given, any thread. Errors: none.
#ifndef RECKON_CUDA_DEVICE_ELEMENTWISE_H_
#define RECKON_CUDA_DEVICE_ELEMENTWISE_H_

#include <cmath>
#include <cstdint>
#include <cstring>

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

// AdaGrad on the aggregate (model::AccumulateDelta with peer_step; model/
// optimizer.h AdagradPlacement::kAggregate), one element: what the peers
// moved this weight since this worker's last step (`peer_step`, weight
// units) is turned back into their gradient with this worker's h, which
// takes the aggregate's square; the change is this worker's own gradient's.
// With peer_step 0 it is OptimizerDelta's AdaGrad, bit for bit.
RECKON_HOST_DEVICE float AdagradAggregateDelta(const OptimizerRule& rule, float g, float peer_step,
                                               float* state) {
  const float aggregate =
      SubRn(g, DivRn(MulRn(peer_step, AddRn(SqrtRn(*state), rule.eps)), rule.lr));
  const float h = AddRn(*state, MulRn(aggregate, aggregate));
  *state = h;
  return DivRn(MulRn(-rule.lr, g), AddRn(SqrtRn(h), rule.eps));
}

// Where AdaGrad on the aggregate reads how far the peers moved each weight
// (PeerStep): the replica's quanta now and as they were after this
// worker's own last step, device pointers; `quanta` null: placement local.
struct PeerMovement {
  const int64_t* quanta = nullptr;
  const int64_t* after_own = nullptr;
  double quantum = 0;
};

// How far the peers moved a weight: the replica's quanta now against
// after this worker's own last step, modulo 2^64, in weight units (the CPU
// backend's MeasurePeerStep).
RECKON_HOST_DEVICE float PeerStep(int64_t now, int64_t after_own, double quantum) {
  const auto moved =
      static_cast<int64_t>(static_cast<uint64_t>(now) - static_cast<uint64_t>(after_own));
  return static_cast<float>(static_cast<double>(moved) * quantum);
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

// The dense fp32 codec with error feedback, one element, as
// codec::EncodeWithFeedback runs it with CODEC_DENSE_FP32
// (codec/elementwise.cc EncodeDenseBody, then SubtractQuanta):
//   - refused when |r| * 2^fb >= 2^62, NaN or Inf (DenseLimitBits: the
//     float bits of 2^(62 - fb); compared on the magnitude's bits);
//   - q = r * 2^fb rounded to an integer, ties to even, in float32;
//   - the residual keeps r - (float)((double)q * quantum).
RECKON_HOST_DEVICE int32_t DenseLimitBits(int fraction_bits) {
  return static_cast<int32_t>(static_cast<uint32_t>(127 + 62 - fraction_bits) << 23);
}
RECKON_HOST_DEVICE bool DenseValueRefused(float r, int32_t limit_bits) {
  int32_t bits;
  memcpy(&bits, &r, sizeof(bits));
  return (bits & 0x7FFFFFFF) >= limit_bits;
}
// REQUIRES: !DenseValueRefused(r, DenseLimitBits(fraction_bits)).
RECKON_HOST_DEVICE int64_t DenseQuanta(float r, int fraction_bits) {
  const uint32_t scale_bits = static_cast<uint32_t>(127 + fraction_bits) << 23;
  float scale;
  memcpy(&scale, &scale_bits, sizeof(scale));
  const float x = MulRn(r, scale);  // exact: a power of two
  const float magnitude = x < 0 ? -x : x;
  const float rounded =
      magnitude < 8388608.0f ? SubRn(AddRn(magnitude, 8388608.0f), 8388608.0f) : magnitude;
  return static_cast<int64_t>(x < 0 ? -rounded : rounded);
}
RECKON_HOST_DEVICE float DenseFeedback(float r, int64_t q, double quantum) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(r, __double2float_rn(__dmul_rn(static_cast<double>(q), quantum)));
#else
  return r - static_cast<float>(static_cast<double>(q) * quantum);
#endif
}

// --- The quanta codecs' encoders on the device (cuda/device_codec.h) ---
// Float64 arithmetic as the host codecs do it (codec/onebit.cc,
// codec/dyntree8.cc, codec/codec.h): each operation correctly rounded, none
// contracted (no FMA: every one is an _rn intrinsic on the device).
#if defined(__CUDA_ARCH__)
RECKON_HOST_DEVICE double AddRnD(double a, double b) { return __dadd_rn(a, b); }
RECKON_HOST_DEVICE double MulRnD(double a, double b) { return __dmul_rn(a, b); }
RECKON_HOST_DEVICE double DivRnD(double a, double b) { return __ddiv_rn(a, b); }
RECKON_HOST_DEVICE float ToFloatRn(double a) { return __double2float_rn(a); }
#else
RECKON_HOST_DEVICE double AddRnD(double a, double b) { return a + b; }
RECKON_HOST_DEVICE double MulRnD(double a, double b) { return a * b; }
RECKON_HOST_DEVICE double DivRnD(double a, double b) { return a / b; }
RECKON_HOST_DEVICE float ToFloatRn(double a) { return static_cast<float>(a); }
#endif

RECKON_HOST_DEVICE uint32_t FloatBits(float x) {
  uint32_t bits;
  memcpy(&bits, &x, sizeof(bits));
  return bits;
}
RECKON_HOST_DEVICE float BitsFloat(uint32_t bits) {
  float x;
  memcpy(&x, &bits, sizeof(x));
  return x;
}

// codec::QuantaPayloadValue: weight_units * 2^fb rounded to float32, then to
// an integer (ties to even), clamped below 2^62 with its sign kept.
// REQUIRES: fraction_bits in [0, 62].
RECKON_HOST_DEVICE float PayloadValue(double weight_units, int fraction_bits) {
  const float scaled =
      ToFloatRn(MulRnD(weight_units, static_cast<double>(uint64_t{1} << fraction_bits)));
  const uint32_t sign = FloatBits(scaled) & 0x80000000u;
  const float magnitude = BitsFloat(FloatBits(scaled) & 0x7FFFFFFFu);
  float rounded = scaled;  // 2^23 and above (Inf, NaN too): an integer already
  if (magnitude < 8388608.0f) {
    rounded = BitsFloat(FloatBits(SubRn(AddRn(magnitude, 8388608.0f), 8388608.0f)) | sign);
  }
  // 2^62 as a float is exact; the largest float below it has the bits one less.
  constexpr uint32_t kTwoTo62Bits = static_cast<uint32_t>(127 + 62) << 23;
  if (!((FloatBits(rounded) & 0x7FFFFFFFu) < kTwoTo62Bits))
    return BitsFloat((kTwoTo62Bits - 1) | sign);
  return rounded;
}

// Onebit's reconstruction values of one column (codec/onebit.cc): the
// non-negative and the negative values' sums in float64, rows in order
// r = 0, 1, ..., each mean as a payload value (0 for a side with none).
// `column`: the column's first element; `stride`: the tensor's cols.
struct OneBitColumnValues {
  float plus = 0;
  float minus = 0;
};
RECKON_HOST_DEVICE OneBitColumnValues OneBitColumn(const float* column, uint32_t rows,
                                                   uint32_t stride, int fraction_bits) {
  double sum_pos = 0, sum_neg = 0;
  uint32_t count_pos = 0;
  for (uint32_t r = 0; r < rows; ++r) {
    const float x = column[static_cast<size_t>(r) * stride];
    if (x >= 0.0f) {
      sum_pos = AddRnD(sum_pos, static_cast<double>(x));
      ++count_pos;
    } else {
      sum_neg = AddRnD(sum_neg, static_cast<double>(x));
    }
  }
  const uint32_t count_neg = rows - count_pos;
  OneBitColumnValues values;
  if (count_pos != 0) {
    values.plus = PayloadValue(DivRnD(sum_pos, static_cast<double>(count_pos)), fraction_bits);
  }
  if (count_neg != 0) {
    values.minus = PayloadValue(DivRnD(sum_neg, static_cast<double>(count_neg)), fraction_bits);
  }
  return values;
}

// codec::DynTreeNearestCode by a search: how many of the 127 midpoints
// between consecutive magnitudes (codec::DynTreeMidpoints, ascending) lie
// below `normalized`; a tie goes to the smaller magnitude, NaN to 0, 1 and
// above to 127.
RECKON_HOST_DEVICE uint32_t DynTreeCodeBelow(double normalized, const double* midpoints) {
  uint32_t below = 0;  // midpoints[0, below) are all < normalized
  for (uint32_t step = 64; step > 0; step >>= 1) {
    if (below + step <= 127 && midpoints[below + step - 1] < normalized) below += step;
  }
  return below;
}

// One value's dyntree8 code (codec/dyntree8.cc): `to_normalized` is
// 2^fb / scale_quanta (0 for a zero scale) and `table` the tensor's 128
// magnitudes in quanta; returns the code's quanta.
RECKON_HOST_DEVICE int64_t DynTree8Element(float x, double to_normalized, const int64_t* table,
                                           const double* midpoints, uint8_t* code) {
  const double magnitude = static_cast<double>(x < 0 ? -x : x);
  const uint32_t m = DynTreeCodeBelow(MulRnD(magnitude, to_normalized), midpoints);
  const bool negative = x < 0 && m != 0;
  *code = static_cast<uint8_t>((uint32_t{negative} << 7) | m);
  return negative ? -table[m] : table[m];
}

// The batched apply's message of word k: the first m with ends[m] > k
// (message m covers words [ends[m-1], ends[m])). REQUIRES: messages >= 1,
// k < ends[messages - 1].
RECKON_HOST_DEVICE int MessageOfWord(const uint64_t* ends, int messages, uint64_t k) {
  int lo = 0, hi = messages - 1;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ends[mid] > k) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return lo;
}

// a + b modulo 2^64 (the replica's addition: codec/fixed_point.h), and in
// *wrapped whether the signed sum left the int64 range: codec/fixed_point.cc's
// rule (both addends' signs differ from the sum's), which the replica's
// count of wraps (Backend::WeightsWrapped) follows.
RECKON_HOST_DEVICE int64_t WrappingAdd(int64_t a, int64_t b, bool* wrapped) {
  const int64_t sum = static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  *wrapped = ((a ^ sum) & (b ^ sum)) < 0;
  return sum;
}

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_ELEMENTWISE_H_
