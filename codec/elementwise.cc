#include "codec/elementwise.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "codec/codec.h"

namespace reckon::codec {

namespace {

// The bodies, inlined into both copies below. Branch-free on purpose: a
// select vectorizes where a branch on each value's magnitude would not.

[[gnu::always_inline]] inline void EncodeDenseBody(const float* __restrict values, size_t n,
                                                   int fraction_bits, char* __restrict payload,
                                                   int64_t* __restrict quanta) {
  // values[i] * 2^fb in float is exactly the double product rounded to
  // float (a power of two scales exactly; no underflow since fb >= 0, and
  // an overflow is infinite both ways), as QuantaPayloadValue computes it.
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(127 + fraction_bits) << 23);
  constexpr float kLargest =
      std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta)) - 1);
  constexpr float kMax = static_cast<float>(kMaxPayloadQuanta);
  for (size_t i = 0; i < n; ++i) {
    const float x = values[i] * scale;
    const float magnitude = std::fabs(x);
    // RoundToNearestEven: below 2^23 adding and taking away 2^23 rounds;
    // from 2^23 on every float is an integer already (and NaN stays NaN).
    const float rounded = magnitude < 0x1p23f ? (magnitude + 0x1p23f) - 0x1p23f : magnitude;
    const float clamped = rounded < kMax ? rounded : kLargest;  // NaN and Inf too
    const float v = std::copysign(clamped, x);
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(payload + 4 * i, &bits, 4);
    } else {
      for (int b = 0; b < 4; ++b) payload[4 * i + b] = static_cast<char>(bits >> (8 * b));
    }
    quanta[i] = static_cast<int64_t>(v);
  }
}

[[gnu::always_inline]] inline uint32_t LoadPayloadBits(const char* at) {
  uint32_t bits;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&bits, at, 4);
  } else {
    bits = 0;
    for (int b = 0; b < 4; ++b) bits |= uint32_t(uint8_t(at[b])) << (8 * b);
  }
  return bits;
}

// The quanta of the payload value with these bits, and in *valid (0 or 1)
// whether it is one: below 2^62 in magnitude (compared as bits: NaN's are
// above) it converts exactly by truncation, and is integral exactly when
// the truncation converts back to it (-0 to +0 included). Where it is not,
// it is 0. In integer masks and float compares only, no branch, no select
// on a float and no call (std::trunc is a libm call on x86-64 before
// SSE4.1): gcc vectorizes the loops below with AVX-512 (a ternary on the
// float here compiled to a branch per value, and the decode stayed scalar).
[[gnu::always_inline]] inline int64_t PayloadQuanta(uint32_t bits, uint32_t* valid) {
  constexpr uint32_t kMaxBits = std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta));
  const uint32_t in_range = (bits & 0x7fffffffu) < kMaxBits;
  const float v = std::bit_cast<float>(bits & (0u - in_range));
  const int64_t q = static_cast<int64_t>(v);
  *valid = in_range & uint32_t(static_cast<float>(q) == v);
  return q;
}

[[gnu::always_inline]] inline bool DecodeDenseBody(const char* __restrict payload, size_t n,
                                                   int64_t* __restrict quanta) {
  uint32_t all_valid = 1;
  for (size_t i = 0; i < n; ++i) {
    uint32_t valid;
    quanta[i] = PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid);
    all_valid &= valid;
  }
  return all_valid != 0;
}

[[gnu::always_inline]] inline bool DenseEqualBody(const char* __restrict payload,
                                                  const int64_t* __restrict quanta, size_t n) {
  uint32_t all_equal = 1;
  for (size_t i = 0; i < n; ++i) {
    uint32_t valid;
    const int64_t q = PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid);
    all_equal &= valid & uint32_t(q == quanta[i]);
  }
  return all_equal != 0;
}

// Wrapped when both addends' signs differ from the sum's; with the
// pointers __restrict, the loop vectorizes (it did not through the
// replica's lambda: 5.9% of a dense worker's samples, one value at a time).
[[gnu::always_inline]] inline uint64_t AddWrappingBody(int64_t* __restrict quanta,
                                                       const int64_t* __restrict delta, size_t n) {
  uint64_t wraps = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = static_cast<uint64_t>(quanta[i]);
    const uint64_t b = static_cast<uint64_t>(delta[i]);
    const uint64_t sum = a + b;
    wraps += ((a ^ sum) & (b ^ sum)) >> 63;
    quanta[i] = static_cast<int64_t>(sum);
  }
  return wraps;
}

[[gnu::always_inline]] inline void SubtractQuantaBody(float* __restrict residual,
                                                      const int64_t* __restrict quanta, size_t n,
                                                      double quantum) {
  for (size_t i = 0; i < n; ++i) {
    residual[i] -= static_cast<float>(static_cast<double>(quanta[i]) * quantum);
  }
}

[[gnu::always_inline]] inline void QuantaToFloatsBody(const int64_t* __restrict quanta, size_t n,
                                                      double quantum, float* __restrict weights) {
  for (size_t i = 0; i < n; ++i) {
    weights[i] = static_cast<float>(static_cast<double>(quanta[i]) * quantum);
  }
}

void EncodeDensePortable(const float* values, size_t n, int fraction_bits, char* payload,
                         int64_t* quanta) {
  EncodeDenseBody(values, n, fraction_bits, payload, quanta);
}
bool DecodeDensePortable(const char* payload, size_t n, int64_t* quanta) {
  return DecodeDenseBody(payload, n, quanta);
}
bool DenseEqualPortable(const char* payload, const int64_t* quanta, size_t n) {
  return DenseEqualBody(payload, quanta, n);
}
uint64_t AddWrappingPortable(int64_t* quanta, const int64_t* delta, size_t n) {
  return AddWrappingBody(quanta, delta, n);
}
void SubtractQuantaPortable(float* residual, const int64_t* quanta, size_t n, double quantum) {
  SubtractQuantaBody(residual, quanta, n, quantum);
}
void QuantaToFloatsPortable(const int64_t* quanta, size_t n, double quantum, float* weights) {
  QuantaToFloatsBody(quanta, n, quantum, weights);
}

#if defined(__x86_64__)
#define RECKON_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
RECKON_AVX512 void EncodeDenseAvx512(const float* values, size_t n, int fraction_bits,
                                     char* payload, int64_t* quanta) {
  EncodeDenseBody(values, n, fraction_bits, payload, quanta);
}
RECKON_AVX512 bool DecodeDenseAvx512(const char* payload, size_t n, int64_t* quanta) {
  return DecodeDenseBody(payload, n, quanta);
}
RECKON_AVX512 bool DenseEqualAvx512(const char* payload, const int64_t* quanta, size_t n) {
  return DenseEqualBody(payload, quanta, n);
}
RECKON_AVX512 uint64_t AddWrappingAvx512(int64_t* quanta, const int64_t* delta, size_t n) {
  return AddWrappingBody(quanta, delta, n);
}
RECKON_AVX512 void SubtractQuantaAvx512(float* residual, const int64_t* quanta, size_t n,
                                        double quantum) {
  SubtractQuantaBody(residual, quanta, n, quantum);
}
RECKON_AVX512 void QuantaToFloatsAvx512(const int64_t* quanta, size_t n, double quantum,
                                        float* weights) {
  QuantaToFloatsBody(quanta, n, quantum, weights);
}
#undef RECKON_AVX512
#endif

bool UseAvx512(Isa isa) { return isa == Isa::kBest && Avx512Available(); }

}  // namespace

bool Avx2Available() {
#if defined(__x86_64__)
  static const bool available = __builtin_cpu_supports("avx2");
  return available;
#else
  return false;
#endif
}

bool Avx512Available() {
#if defined(__x86_64__)
  static const bool available =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bw");
  return available;
#else
  return false;
#endif
}

void EncodeDenseFp32Values(const float* values, size_t n, int fraction_bits, char* payload,
                           int64_t* quanta, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return EncodeDenseAvx512(values, n, fraction_bits, payload, quanta);
#endif
  EncodeDensePortable(values, n, fraction_bits, payload, quanta);
}

bool DecodeDenseFp32Values(const char* payload, size_t n, int64_t* quanta, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DecodeDenseAvx512(payload, n, quanta);
#endif
  return DecodeDensePortable(payload, n, quanta);
}

bool DenseFp32ValuesEqual(const char* payload, const int64_t* quanta, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DenseEqualAvx512(payload, quanta, n);
#endif
  return DenseEqualPortable(payload, quanta, n);
}

uint64_t AddQuantaWrapping(int64_t* quanta, const int64_t* delta, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return AddWrappingAvx512(quanta, delta, n);
#endif
  return AddWrappingPortable(quanta, delta, n);
}

void SubtractQuanta(float* residual, const int64_t* quanta, size_t n, double quantum, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return SubtractQuantaAvx512(residual, quanta, n, quantum);
#endif
  SubtractQuantaPortable(residual, quanta, n, quantum);
}

void QuantaToFloats(const int64_t* quanta, size_t n, double quantum, float* weights, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return QuantaToFloatsAvx512(quanta, n, quantum, weights);
#endif
  QuantaToFloatsPortable(quanta, n, quantum, weights);
}

}  // namespace reckon::codec
