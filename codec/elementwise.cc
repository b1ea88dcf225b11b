#include "codec/elementwise.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/codec.h"
#include "codec/elementwise_avx2.h"
#include "codec/elementwise_bodies.h"

namespace reckon::codec {

namespace {

using namespace elementwise_bodies;  // NOLINT: the bodies, one definition

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

// The delta's values i to i + 7 as int64 lanes: PayloadQuanta's (a value
// out of its range is 0; a payload the apply takes has been checked, so
// every value is an integer below 2^62 and converts exactly), or an int64
// array's.
RECKON_AVX512 inline __m512i DeltaLanes(const char* payload, size_t i) {
  constexpr int32_t kMaxBits = std::bit_cast<int32_t>(static_cast<float>(kMaxPayloadQuanta));
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 4 * i));
  const __mmask8 in_range = _mm256_cmplt_epi32_mask(
      _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MAX)), _mm256_set1_epi32(kMaxBits));
  return _mm512_cvttps_epi64(_mm256_castsi256_ps(_mm256_maskz_mov_epi32(in_range, bits)));
}
RECKON_AVX512 inline __m512i DeltaLanes(const int64_t* delta, size_t i) {
  return _mm512_loadu_si512(delta + i);
}

// AddWrappingBody<true> eight values at a time with the float copy in
// streaming stores from its first 32-byte boundary (elementwise.h
// FloatCopyOut; gcc's vectorized body stores it through the caches): the
// conversions are the body's, int64 -> double and double -> float rounded
// to nearest, so the bits are its bits.
template <typename Delta>
RECKON_AVX512 uint64_t AddWrappingStreamingCopyAvx512(int64_t* quanta, const Delta* delta,
                                                      size_t n, float* weights, double quantum) {
  const size_t head = FloatsBefore32ByteBoundary(weights, n);
  const uint64_t head_wraps = AddWrappingBody<true>(quanta, delta, head, weights, quantum);
  const __m512d quantum_lanes = _mm512_set1_pd(quantum);
  __m512i any_wrap = _mm512_setzero_si512();
  size_t i = head;
  for (; i + 8 <= n; i += 8) {
    const __m512i a = _mm512_loadu_si512(quanta + i);
    const __m512i b = DeltaLanes(delta, i);
    const __m512i sum = _mm512_add_epi64(a, b);
    _mm512_storeu_si512(quanta + i, sum);
    _mm256_stream_ps(weights + i,
                     _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_cvtepi64_pd(sum), quantum_lanes)));
    // WrapBits, OR-ed over the lanes: bit 63 of a lane where a sum wrapped.
    any_wrap = _mm512_or_si512(
        any_wrap, _mm512_and_si512(_mm512_xor_si512(a, sum), _mm512_xor_si512(b, sum)));
  }
  _mm_sfence();
  const uint64_t tail =
      AddWrappingBody<true>(quanta + i, DeltaFrom(delta, i), n - i, weights + i, quantum);
  if (_mm512_movepi64_mask(any_wrap) == 0) return head_wraps + tail;
  return head_wraps + tail + CountWrapsBody(quanta + head, DeltaFrom(delta, head), i - head);
}
RECKON_AVX512 uint64_t AddDenseWrappingCopyAvx512(int64_t* quanta, const char* payload, size_t n,
                                                  float* weights, double quantum) {
  return AddWrappingStreamingCopyAvx512(quanta, payload, n, weights, quantum);
}
RECKON_AVX512 uint64_t AddWrappingCopyAvx512(int64_t* quanta, const int64_t* delta, size_t n,
                                             float* weights, double quantum) {
  return AddWrappingStreamingCopyAvx512(quanta, delta, n, weights, quantum);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef RECKON_AVX512
#endif

}  // namespace

bool UseAvx512(Isa isa) { return isa == Isa::kBest && Avx512Available(); }

bool UseAvx2(Isa isa) { return isa != Isa::kPortable && !UseAvx512(isa) && Avx2Available(); }

const char* ElementwiseCopy(Isa isa) {
  return UseAvx512(isa) ? "AVX-512" : UseAvx2(isa) ? "AVX2" : "portable";
}

namespace {

enum class IsaCeiling { kPortable, kAvx2, kAvx512 };

// RECKON_CPU_ISA, read on first use. A value it does not know stops the
// process: a benchmark that silently measured another copy than the one
// asked for would be worse than none.
IsaCeiling CeilingFromEnvironment() {
  const char* value = std::getenv("RECKON_CPU_ISA");
  if (value == nullptr || std::strcmp(value, "avx512") == 0) return IsaCeiling::kAvx512;
  if (std::strcmp(value, "avx2") == 0) return IsaCeiling::kAvx2;
  if (std::strcmp(value, "portable") == 0) return IsaCeiling::kPortable;
  std::fprintf(stderr, "RECKON_CPU_ISA=%s: expected avx512, avx2 or portable\n", value);
  std::exit(2);
}

IsaCeiling Ceiling() {
  static const IsaCeiling ceiling = CeilingFromEnvironment();
  return ceiling;
}

}  // namespace

const char* IsaCeilingName() {
  switch (Ceiling()) {
    case IsaCeiling::kPortable:
      return "portable";
    case IsaCeiling::kAvx2:
      return "avx2";
    case IsaCeiling::kAvx512:
      break;
  }
  return "avx512";
}

bool Avx2Available() {
#if defined(__x86_64__)
  static const bool available = Ceiling() >= IsaCeiling::kAvx2 && __builtin_cpu_supports("avx2");
  return available;
#else
  return false;
#endif
}

bool Avx512Available() {
#if defined(__x86_64__)
  static const bool available =
      Ceiling() >= IsaCeiling::kAvx512 && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw");
  return available;
#else
  return false;
#endif
}

void EncodeDenseFp32Values(const float* values, size_t n, int fraction_bits, char* payload,
                           Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return EncodeDenseAvx512(values, n, fraction_bits, payload);
  if (UseAvx2(isa)) return elementwise_avx2::EncodeDense(values, n, fraction_bits, payload);
#endif
  EncodeDensePortable(values, n, fraction_bits, payload);
}

bool DenseFp32ValuesValid(const char* payload, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DenseValidAvx512(payload, n);
  if (UseAvx2(isa)) return elementwise_avx2::DenseValid(payload, n);
#endif
  return DenseValidPortable(payload, n);
}

bool DenseFp32PayloadsEqual(const char* payload, const char* expected, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DensePayloadsEqualAvx512(payload, expected, n);
  if (UseAvx2(isa)) return elementwise_avx2::DensePayloadsEqual(payload, expected, n);
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
  if (UseAvx2(isa)) {
    return elementwise_avx2::AddDenseWrapping(quanta, payload, n, copy.weights, copy.quantum);
  }
#endif
  return floats ? AddDenseWrappingCopyPortable(quanta, payload, n, copy.weights, copy.quantum)
                : AddDenseWrappingPortable(quanta, payload, n);
}

void SubtractDenseFp32(float* residual, const char* payload, size_t n, int fraction_bits, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return SubtractDenseAvx512(residual, payload, n, fraction_bits);
  if (UseAvx2(isa)) return elementwise_avx2::SubtractDense(residual, payload, n, fraction_bits);
#endif
  SubtractDensePortable(residual, payload, n, fraction_bits);
}

bool DecodeDenseFp32Values(const char* payload, size_t n, int64_t* quanta, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DecodeDenseAvx512(payload, n, quanta);
  if (UseAvx2(isa)) return elementwise_avx2::DecodeDense(payload, n, quanta);
#endif
  return DecodeDensePortable(payload, n, quanta);
}

bool DenseFp32ValuesEqual(const char* payload, const int64_t* quanta, size_t n, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return DenseEqualAvx512(payload, quanta, n);
  if (UseAvx2(isa)) return elementwise_avx2::DenseEqual(payload, quanta, n);
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
  if (UseAvx2(isa)) {
    return elementwise_avx2::AddWrapping(quanta, delta, n, copy.weights, copy.quantum);
  }
#endif
  return floats ? AddWrappingCopyPortable(quanta, delta, n, copy.weights, copy.quantum)
                : AddWrappingPortable(quanta, delta, n);
}

void SubtractQuanta(float* residual, const int64_t* quanta, size_t n, double quantum, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return SubtractQuantaAvx512(residual, quanta, n, quantum);
  if (UseAvx2(isa)) return elementwise_avx2::SubtractQuanta(residual, quanta, n, quantum);
#endif
  SubtractQuantaPortable(residual, quanta, n, quantum);
}

void QuantaToFloats(const int64_t* quanta, size_t n, double quantum, float* weights, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return QuantaToFloatsAvx512(quanta, n, quantum, weights);
  if (UseAvx2(isa)) return elementwise_avx2::QuantaToFloats(quanta, n, quantum, weights);
#endif
  QuantaToFloatsPortable(quanta, n, quantum, weights);
}

}  // namespace reckon::codec
