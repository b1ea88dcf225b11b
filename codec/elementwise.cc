#include "codec/elementwise.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/codec.h"

namespace reckon::codec {

namespace {

// The bodies, inlined into both copies below. Branch-free on purpose: a
// select vectorizes where a branch on each value's magnitude would not.

[[gnu::always_inline]] inline void EncodeDenseBody(const float* __restrict values, size_t n,
                                                   int fraction_bits, char* __restrict payload) {
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

// PayloadQuanta's *valid alone, in 32-bit lanes: no conversion to int64,
// which takes two conversions each way for every 16 values (the walk so
// took 357 ns for a 16 KB block in the L1 cache, twice the encode that
// wrote it: compute, not bytes). Below 2^62 (as bits, NaN above) and
// integral: from 2^23 on every float is; below it, adding and taking away
// 2^23 rounds to the nearest integer (round to nearest, the default mode,
// as the encoder's rounding), which gives the value back exactly when it
// is one (-0 is +0's magnitude; a subnormal rounds to 0 and is refused).
// The three tests are masks combined, not a select on a float, so it
// vectorizes 16 values an instruction (Elementwise tests hold it to
// PayloadQuanta).
[[gnu::always_inline]] inline uint32_t PayloadValueValid(uint32_t bits) {
  constexpr uint32_t kMaxBits = std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta));
  const uint32_t magnitude_bits = bits & 0x7fffffffu;
  const float magnitude = std::bit_cast<float>(magnitude_bits);
  const float rounded = (magnitude + 0x1p23f) - 0x1p23f;
  return uint32_t(magnitude_bits < kMaxBits) &
         (uint32_t(magnitude >= 0x1p23f) | uint32_t(rounded == magnitude));
}

// DecodeDenseBody's test alone: whether every value is one, nothing written.
[[gnu::always_inline]] inline bool DenseValidBody(const char* __restrict payload, size_t n) {
  uint32_t all_valid = 1;
  for (size_t i = 0; i < n; ++i) all_valid &= PayloadValueValid(LoadPayloadBits(payload + 4 * i));
  return all_valid != 0;
}

// The same test against another dense payload's values (a view of checked
// bytes, quanta_span.h); `payload` == `expected` is the validity walk alone.
[[gnu::always_inline]] inline bool DensePayloadsEqualBody(const char* payload, const char* expected,
                                                          size_t n) {
  uint32_t all_equal = 1;
  for (size_t i = 0; i < n; ++i) {
    uint32_t valid, expected_valid;
    const int64_t q = PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid);
    const int64_t e = PayloadQuanta(LoadPayloadBits(expected + 4 * i), &expected_valid);
    all_equal &= valid & expected_valid & uint32_t(q == e);
  }
  return all_equal != 0;
}

// a + b modulo 2^64 (the replica's arithmetic). The sum left the signed
// int64 range (wrapped) exactly when both addends' signs differ from the
// sum's: bit 63 of WrapBits. Wraps are rare (the grid's range is 2^63
// quanta), so the loops below OR each sum's bits into one word, three
// operations for two vectors, and count only a range where that word's
// bit 63 is set, again from the sums and the addends (a = sum - b modulo
// 2^64): counting every sum as it was made took a shift and two adds more
// for every eight, a third of the dense apply's sum in the L1 cache.
[[gnu::always_inline]] inline uint64_t WrapBits(uint64_t a, uint64_t b, uint64_t sum) {
  return (a ^ sum) & (b ^ sum);
}

// The float copy of `quanta` quanta (QuantaToFloat, fixed_point.h): one
// definition for QuantaToFloatsBody and the sums that write the copy.
[[gnu::always_inline]] inline float FloatOfQuanta(int64_t quanta, double quantum) {
  return static_cast<float>(static_cast<double>(quanta) * quantum);
}

// The delta's value i: a checked dense payload's (4 bytes a value) or an
// int64's.
[[gnu::always_inline]] inline uint64_t DeltaAt(const char* __restrict payload, size_t i) {
  uint32_t valid;
  return static_cast<uint64_t>(PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid));
}
[[gnu::always_inline]] inline uint64_t DeltaAt(const int64_t* __restrict delta, size_t i) {
  return static_cast<uint64_t>(delta[i]);
}

// The dense apply's sums: quanta[i] += the delta's value i, modulo 2^64,
// and where kFloats the float copy in the same loop, from the sum still in
// its register (a second pass over each block read the sums back and left
// the quanta's and the copy's memory streams one after the other: the
// apply of one core's half of a 669,706-parameter model from memory 197 ->
// 168 us, mean of 40). Returns how many sums wrapped. With the pointers
// __restrict, the loop vectorizes (it did not through the replica's
// lambda: 5.9% of a dense worker's samples, one value at a time). Software
// prefetch 1,024 values ahead was tried (a139dd4) and taken out: one core
// alone applied from memory in 84-129 us instead of 140-160, but a dense
// worker's two threads applying at once are bound by the bandwidth (its
// apply's samples 712-869 before, 852-902 with it), and a block in the L1
// cache took 8% longer.
template <bool kFloats, typename Delta>
[[gnu::always_inline]] inline uint64_t AddWrappingBody(int64_t* __restrict quanta,
                                                       const Delta* __restrict delta, size_t n,
                                                       float* __restrict weights, double quantum) {
  uint64_t any_wrap = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = static_cast<uint64_t>(quanta[i]), b = DeltaAt(delta, i);
    const uint64_t sum = a + b;
    quanta[i] = static_cast<int64_t>(sum);
    if constexpr (kFloats) weights[i] = FloatOfQuanta(static_cast<int64_t>(sum), quantum);
    any_wrap |= WrapBits(a, b, sum);
  }
  if ((any_wrap >> 63) == 0) return 0;
  uint64_t wraps = 0;  // a = sum - b modulo 2^64
  for (size_t i = 0; i < n; ++i) {
    const uint64_t sum = static_cast<uint64_t>(quanta[i]), b = DeltaAt(delta, i);
    wraps += WrapBits(sum - b, b, sum) >> 63;
  }
  return wraps;
}

// SubtractQuantaBody from the payload, in float: a payload value v is an
// integer below 2^62 (24 significant bits) and the quantum 2^-fb (fb in
// [0, 62]) a float, so v * 2^-fb is exact in double and (float) rounds the
// exact product, as the float multiply does: the same bits as
// (float)((double)v * quantum), 16 values an instruction instead of eight
// and no conversions (the double form took 294 ns for a 16 KB block in the
// L1 cache, more than the encode before it). -0 is 0 quanta: adding +0
// makes it +0 (round to nearest), or a residual of -0 would become +0 here
// and stay -0 from the int64 quanta (and on the device,
// cuda/device_codec.h). The same bits as SubtractQuanta.
[[gnu::always_inline]] inline void SubtractDenseBody(float* __restrict residual,
                                                     const char* __restrict payload, size_t n,
                                                     int fraction_bits) {
  const float quantum = std::bit_cast<float>(static_cast<uint32_t>(127 - fraction_bits) << 23);
  for (size_t i = 0; i < n; ++i) {
    const float v = std::bit_cast<float>(LoadPayloadBits(payload + 4 * i));
    residual[i] -= (v + 0.0f) * quantum;
  }
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
  for (size_t i = 0; i < n; ++i) weights[i] = FloatOfQuanta(quanta[i], quantum);
}

void EncodeDensePortable(const float* values, size_t n, int fraction_bits, char* payload) {
  EncodeDenseBody(values, n, fraction_bits, payload);
}
bool DenseValidPortable(const char* payload, size_t n) { return DenseValidBody(payload, n); }
bool DensePayloadsEqualPortable(const char* payload, const char* expected, size_t n) {
  return DensePayloadsEqualBody(payload, expected, n);
}
uint64_t AddDenseWrappingPortable(int64_t* quanta, const char* payload, size_t n) {
  return AddWrappingBody<false>(quanta, payload, n, nullptr, 0);
}
uint64_t AddDenseWrappingCopyPortable(int64_t* quanta, const char* payload, size_t n,
                                      float* weights, double quantum) {
  return AddWrappingBody<true>(quanta, payload, n, weights, quantum);
}
void SubtractDensePortable(float* residual, const char* payload, size_t n, int fraction_bits) {
  SubtractDenseBody(residual, payload, n, fraction_bits);
}
bool DecodeDensePortable(const char* payload, size_t n, int64_t* quanta) {
  return DecodeDenseBody(payload, n, quanta);
}
bool DenseEqualPortable(const char* payload, const int64_t* quanta, size_t n) {
  return DenseEqualBody(payload, quanta, n);
}
uint64_t AddWrappingPortable(int64_t* quanta, const int64_t* delta, size_t n) {
  return AddWrappingBody<false>(quanta, delta, n, nullptr, 0);
}
uint64_t AddWrappingCopyPortable(int64_t* quanta, const int64_t* delta, size_t n, float* weights,
                                 double quantum) {
  return AddWrappingBody<true>(quanta, delta, n, weights, quantum);
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
                                     char* payload) {
  EncodeDenseBody(values, n, fraction_bits, payload);
}
RECKON_AVX512 bool DensePayloadsEqualAvx512(const char* payload, const char* expected, size_t n) {
  return DensePayloadsEqualBody(payload, expected, n);
}
RECKON_AVX512 uint64_t AddDenseWrappingAvx512(int64_t* quanta, const char* payload, size_t n) {
  return AddWrappingBody<false>(quanta, payload, n, nullptr, 0);
}
RECKON_AVX512 uint64_t AddDenseWrappingCopyAvx512(int64_t* quanta, const char* payload, size_t n,
                                                  float* weights, double quantum) {
  return AddWrappingBody<true>(quanta, payload, n, weights, quantum);
}
RECKON_AVX512 void SubtractDenseAvx512(float* residual, const char* payload, size_t n,
                                       int fraction_bits) {
  SubtractDenseBody(residual, payload, n, fraction_bits);
}
RECKON_AVX512 bool DecodeDenseAvx512(const char* payload, size_t n, int64_t* quanta) {
  return DecodeDenseBody(payload, n, quanta);
}
RECKON_AVX512 bool DenseEqualAvx512(const char* payload, const int64_t* quanta, size_t n) {
  return DenseEqualBody(payload, quanta, n);
}
RECKON_AVX512 uint64_t AddWrappingAvx512(int64_t* quanta, const int64_t* delta, size_t n) {
  return AddWrappingBody<false>(quanta, delta, n, nullptr, 0);
}
RECKON_AVX512 uint64_t AddWrappingCopyAvx512(int64_t* quanta, const int64_t* delta, size_t n,
                                             float* weights, double quantum) {
  return AddWrappingBody<true>(quanta, delta, n, weights, quantum);
}
RECKON_AVX512 void SubtractQuantaAvx512(float* residual, const int64_t* quanta, size_t n,
                                        double quantum) {
  SubtractQuantaBody(residual, quanta, n, quantum);
}
RECKON_AVX512 void QuantaToFloatsAvx512(const int64_t* quanta, size_t n, double quantum,
                                        float* weights) {
  QuantaToFloatsBody(quanta, n, quantum, weights);
}
// The validity walk is written in intrinsics (below; so is dyntree8's
// encode, elementwise_dyntree8.cc). GCC 12 warns that the intrinsics' own
// _mm512_undefined_*() sources "may be used uninitialized": a false
// positive from its headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// DenseValidBody in intrinsics: gcc has no vrndscaleps for the portable
// body's rounding by 2^23 (in a copy for any x86-64 std::trunc is a libm
// call), and with it a value's test is four operations on 16 lanes, not
// nine (the walk of a 16 KB block in the L1 cache: 220 -> 106 ns). The same
// test: below 2^62 as bits (NaN and Inf above), and its truncation equal to
// it (a subnormal truncates to 0 and fails; -0 is +0's magnitude); the tail
// is the body's.
RECKON_AVX512 bool DenseValidAvx512(const char* payload, size_t n) {
  constexpr uint32_t kMaxBits = std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta));
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i max_bits = _mm512_set1_epi32(static_cast<int>(kMaxBits));
  __mmask16 all_valid = 0xffff;
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i bits = _mm512_and_si512(_mm512_loadu_si512(payload + 4 * i), magnitude_mask);
    const __m512 magnitude = _mm512_castsi512_ps(bits);
    const __m512 truncated =
        _mm512_roundscale_ps(magnitude, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    all_valid &= _mm512_mask_cmp_ps_mask(_mm512_cmplt_epu32_mask(bits, max_bits), truncated,
                                         magnitude, _CMP_EQ_OQ);
  }
  return all_valid == 0xffff && DenseValidBody(payload + 4 * i, n - i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef RECKON_AVX512
#endif

}  // namespace

bool UseAvx512(Isa isa) { return isa == Isa::kBest && Avx512Available(); }

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
                           Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return EncodeDenseAvx512(values, n, fraction_bits, payload);
#endif
  EncodeDensePortable(values, n, fraction_bits, payload);
}

bool DenseFp32ValuesValid(const char* payload, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DenseValidAvx512(payload, n);
#endif
  return DenseValidPortable(payload, n);
}

bool DenseFp32PayloadsEqual(const char* payload, const char* expected, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DensePayloadsEqualAvx512(payload, expected, n);
#endif
  return DensePayloadsEqualPortable(payload, expected, n);
}

uint64_t AddDenseFp32Wrapping(int64_t* quanta, const char* payload, size_t n, FloatCopyOut copy,
                              Isa isa) {
  const bool floats = copy.weights != nullptr;
#if defined(__x86_64__)
  if (UseAvx512(isa)) {
    return floats ? AddDenseWrappingCopyAvx512(quanta, payload, n, copy.weights, copy.quantum)
                  : AddDenseWrappingAvx512(quanta, payload, n);
  }
#endif
  return floats ? AddDenseWrappingCopyPortable(quanta, payload, n, copy.weights, copy.quantum)
                : AddDenseWrappingPortable(quanta, payload, n);
}

void SubtractDenseFp32(float* residual, const char* payload, size_t n, int fraction_bits, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return SubtractDenseAvx512(residual, payload, n, fraction_bits);
#endif
  SubtractDensePortable(residual, payload, n, fraction_bits);
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

uint64_t AddQuantaWrapping(int64_t* quanta, const int64_t* delta, size_t n, FloatCopyOut copy,
                           Isa isa) {
  const bool floats = copy.weights != nullptr;
#if defined(__x86_64__)
  if (UseAvx512(isa)) {
    return floats ? AddWrappingCopyAvx512(quanta, delta, n, copy.weights, copy.quantum)
                  : AddWrappingAvx512(quanta, delta, n);
  }
#endif
  return floats ? AddWrappingCopyPortable(quanta, delta, n, copy.weights, copy.quantum)
                : AddWrappingPortable(quanta, delta, n);
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
