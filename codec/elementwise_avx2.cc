// The elementwise passes' AVX2 copies (elementwise.h's Isa::kAvx2, and
// kBest on a CPU with AVX2 but not AVX-512: AMD's Zen 2 and Zen 3, Intel's
// cores before Ice Lake's servers). Where gcc vectorizes a body as it is
// (its values in 32-bit float lanes) the copy is the body compiled for
// AVX2; AVX2 has no conversion between int64 and floating point, so the
// passes that make one are written here in intrinsics, each giving the
// body's bits (Elementwise tests hold every copy to the portable one).
#include "codec/elementwise_avx2.h"

#if defined(__x86_64__)
#include <immintrin.h>

#include <bit>
#include <cstdint>

#include "codec/elementwise_bodies.h"

namespace reckon::codec::elementwise_avx2 {

using namespace elementwise_bodies;  // NOLINT: the bodies, one definition

#define RECKON_AVX2 __attribute__((target("avx2")))

constexpr int32_t kMaxBits = std::bit_cast<int32_t>(static_cast<float>(kMaxPayloadQuanta));

// EncodeDenseBody on eight values: gcc leaves the body's two selects as
// branches for AVX2 (it has no mask registers), scalar and mispredicted
// (9.6 us for a 16 KB block in the L1 cache on a Zen 3 core). The same
// operations with the selects as blends.
RECKON_AVX2 void EncodeDense(const float* values, size_t n, int fraction_bits, char* payload) {
  const __m256 scale =
      _mm256_set1_ps(std::bit_cast<float>(static_cast<uint32_t>(127 + fraction_bits) << 23));
  const __m256 two23 = _mm256_set1_ps(0x1p23f);
  const __m256 max = _mm256_set1_ps(static_cast<float>(kMaxPayloadQuanta));
  const __m256 largest = _mm256_castsi256_ps(_mm256_set1_epi32(kMaxBits - 1));
  const __m256 sign_bit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_mul_ps(_mm256_loadu_ps(values + i), scale);
    const __m256 magnitude = _mm256_andnot_ps(sign_bit, x);
    const __m256 rounded =
        _mm256_blendv_ps(magnitude, _mm256_sub_ps(_mm256_add_ps(magnitude, two23), two23),
                         _mm256_cmp_ps(magnitude, two23, _CMP_LT_OQ));
    const __m256 clamped =
        _mm256_blendv_ps(largest, rounded, _mm256_cmp_ps(rounded, max, _CMP_LT_OQ));
    _mm256_storeu_ps(reinterpret_cast<float*>(payload + 4 * i),
                     _mm256_or_ps(clamped, _mm256_and_ps(x, sign_bit)));
  }
  EncodeDenseBody(values + i, n - i, fraction_bits, payload + 4 * i);
}

// PayloadValueValid on eight values' bits: all ones in a lane where valid.
RECKON_AVX2 inline __m256i ValidLanes(__m256i bits) {
  const __m256i magnitude_bits = _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MAX));
  const __m256 magnitude = _mm256_castsi256_ps(magnitude_bits);
  const __m256 two23 = _mm256_set1_ps(0x1p23f);
  const __m256 rounded = _mm256_sub_ps(_mm256_add_ps(magnitude, two23), two23);
  const __m256 integral = _mm256_or_ps(_mm256_cmp_ps(magnitude, two23, _CMP_GE_OQ),
                                       _mm256_cmp_ps(rounded, magnitude, _CMP_EQ_OQ));
  return _mm256_and_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(kMaxBits), magnitude_bits),
                          _mm256_castps_si256(integral));
}

// PayloadQuanta's value (not its validity) of four payload values' bits,
// without a float conversion: a value below 2^62 in magnitude is its
// 24-bit significand m times 2^(e - 150) (e its biased exponent), so its
// magnitude truncated is m shifted left by e - 150 or right by 150 - e
// (vpsllvq and vpsrlvq give 0 for a count of 64 or more, and a negative
// count is one), then negated where the sign is set; any other value is 0.
// A subnormal's or a zero's e is 0: shifted right by 150, 0, as truncated.
RECKON_AVX2 inline __m256i QuantaOfFour(__m128i bits) {
  const __m128i in_range =
      _mm_cmpgt_epi32(_mm_set1_epi32(kMaxBits), _mm_and_si128(bits, _mm_set1_epi32(INT32_MAX)));
  const __m128i kept = _mm_and_si128(bits, in_range);
  const __m128i exponent = _mm_and_si128(_mm_srli_epi32(kept, 23), _mm_set1_epi32(0xff));
  const __m256i significand = _mm256_cvtepu32_epi64(
      _mm_or_si128(_mm_and_si128(kept, _mm_set1_epi32(0x7fffff)), _mm_set1_epi32(0x800000)));
  const __m128i left = _mm_sub_epi32(exponent, _mm_set1_epi32(150));
  const __m256i magnitude = _mm256_or_si256(
      _mm256_sllv_epi64(significand, _mm256_cvtepi32_epi64(left)),
      _mm256_srlv_epi64(significand,
                        _mm256_cvtepi32_epi64(_mm_sub_epi32(_mm_setzero_si128(), left))));
  const __m256i sign = _mm256_cvtepi32_epi64(_mm_srai_epi32(kept, 31));
  return _mm256_sub_epi64(_mm256_xor_si256(magnitude, sign), sign);
}

// (double)x for four int64 lanes, rounded once as the conversion rounds
// (AVX2 has no vcvtqq2pd): x's top 16 bits (signed) times 2^48 and its low
// 48 bits each made exactly as a double by placing them in a double's
// significand (offset by 3 * 2^67 and by 2^52), the offsets taken away
// exactly, and the two parts added: one rounding, of the exact sum x.
RECKON_AVX2 inline __m256d DoublesOf(__m256i x) {
  const __m256i top = _mm256_blend_epi16(_mm256_srai_epi32(x, 16), _mm256_setzero_si256(), 0x33);
  const __m256d high = _mm256_sub_pd(
      _mm256_castsi256_pd(_mm256_add_epi64(top, _mm256_castpd_si256(_mm256_set1_pd(0x3p67)))),
      _mm256_set1_pd(0x3p67 + 0x1p52));
  const __m256d low =
      _mm256_castsi256_pd(_mm256_blend_epi16(x, _mm256_castpd_si256(_mm256_set1_pd(0x1p52)), 0x88));
  return _mm256_add_pd(high, low);
}

// The magic number of the conversions below 2^51 in magnitude: for an
// integer d with |d| < 2^51, 1.5 * 2^52 + d is exact (the doubles from 2^52
// to 2^53 are the integers), and its bits are 1.5 * 2^52's plus d.
constexpr double kMagic = 0x1.8p52;
constexpr int64_t kMagicBits = std::bit_cast<int64_t>(kMagic);

// FloatOfQuanta of eight int64 lanes. Where all eight are below 2^51 in
// magnitude (a replica's weights are, for any fraction_bits that leaves
// them 2^-10 of precision and a range above 2,048), each becomes a double
// by the magic number, one integer add and one subtract; DoublesOf's six
// operations otherwise. Both exact, so the same double.
RECKON_AVX2 inline __m256 FloatsOf(__m256i q0, __m256i q1, __m256d quantum) {
  const __m256i half_range = _mm256_set1_epi64x(int64_t{1} << 51);
  const __m256i shifted =
      _mm256_or_si256(_mm256_add_epi64(q0, half_range), _mm256_add_epi64(q1, half_range));
  __m256d d0, d1;
  if (_mm256_testz_si256(_mm256_srli_epi64(shifted, 52), _mm256_srli_epi64(shifted, 52))) {
    const __m256i magic_bits = _mm256_set1_epi64x(kMagicBits);
    const __m256d magic = _mm256_set1_pd(kMagic);
    d0 = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(q0, magic_bits)), magic);
    d1 = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(q1, magic_bits)), magic);
  } else {
    d0 = DoublesOf(q0);
    d1 = DoublesOf(q1);
  }
  return _mm256_set_m128(_mm256_cvtpd_ps(_mm256_mul_pd(d1, quantum)),
                         _mm256_cvtpd_ps(_mm256_mul_pd(d0, quantum)));
}

// Whether every bit of v is set.
RECKON_AVX2 inline bool AllOnes(__m256i v) {
  return _mm256_testc_si256(v, _mm256_set1_epi32(-1)) != 0;
}

// The delta's values i..i+7 as two vectors of four int64 (DeltaAt's), and
// the delta from value i on (the scalar tail's).
// A checked payload's values are integers: where all eight are below 2^51
// in magnitude (as bits), each becomes a double exactly and that an int64
// by the magic number, three operations for four values instead of
// QuantaOfFour's eighteen.
RECKON_AVX2 inline void DeltaLanes(const char* payload, size_t i, __m256i* d0, __m256i* d1) {
  const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 4 * i));
  constexpr int32_t kSmallBits = std::bit_cast<int32_t>(0x1p51f);
  const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(kSmallBits),
                                           _mm256_and_si256(bits, _mm256_set1_epi32(INT32_MAX)));
  if (_mm256_movemask_ps(_mm256_castsi256_ps(small)) == 0xff) {
    const __m256d magic = _mm256_set1_pd(kMagic);
    const __m256i magic_bits = _mm256_set1_epi64x(kMagicBits);
    const __m256 values = _mm256_castsi256_ps(bits);
    *d0 = _mm256_sub_epi64(
        _mm256_castpd_si256(_mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(values)), magic)),
        magic_bits);
    *d1 = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(
                               _mm256_cvtps_pd(_mm256_extractf128_ps(values, 1)), magic)),
                           magic_bits);
    return;
  }
  *d0 = QuantaOfFour(_mm256_castsi256_si128(bits));
  *d1 = QuantaOfFour(_mm256_extracti128_si256(bits, 1));
}
RECKON_AVX2 inline void DeltaLanes(const int64_t* delta, size_t i, __m256i* d0, __m256i* d1) {
  *d0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(delta + i));
  *d1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(delta + i + 4));
}
// AddWrappingBody eight values at a time (gcc keeps the conversions to and
// from int64 scalar), its OR of WrapBits in a vector; the float copy in
// streaming stores from its first 32-byte boundary (elementwise.h
// FloatCopyOut), the values before it by the body.
template <bool kFloats, typename Delta>
RECKON_AVX2 uint64_t AddWrappingLanes(int64_t* quanta, const Delta* delta, size_t n, float* weights,
                                      double quantum) {
  const size_t head = kFloats ? FloatsBefore32ByteBoundary(weights, n) : 0;
  const uint64_t head_wraps = AddWrappingBody<kFloats>(quanta, delta, head, weights, quantum);
  const __m256d quantum_lanes = _mm256_set1_pd(quantum);
  __m256i any_wrap = _mm256_setzero_si256();
  size_t i = head;
  for (; i + 8 <= n; i += 8) {
    __m256i d0, d1;
    DeltaLanes(delta, i, &d0, &d1);
    auto* at = reinterpret_cast<__m256i*>(quanta + i);
    const __m256i a0 = _mm256_loadu_si256(at), a1 = _mm256_loadu_si256(at + 1);
    const __m256i s0 = _mm256_add_epi64(a0, d0), s1 = _mm256_add_epi64(a1, d1);
    _mm256_storeu_si256(at, s0);
    _mm256_storeu_si256(at + 1, s1);
    if constexpr (kFloats) _mm256_stream_ps(weights + i, FloatsOf(s0, s1, quantum_lanes));
    any_wrap = _mm256_or_si256(
        any_wrap,
        _mm256_or_si256(_mm256_and_si256(_mm256_xor_si256(a0, s0), _mm256_xor_si256(d0, s0)),
                        _mm256_and_si256(_mm256_xor_si256(a1, s1), _mm256_xor_si256(d1, s1))));
  }
  if constexpr (kFloats) _mm_sfence();
  const uint64_t tail = AddWrappingBody<kFloats>(quanta + i, DeltaFrom(delta, i), n - i,
                                                 kFloats ? weights + i : nullptr, quantum);
  // Bit 63 of any lane: the sign bits of the four int64 lanes.
  if (_mm256_movemask_pd(_mm256_castsi256_pd(any_wrap)) == 0) return head_wraps + tail;
  return head_wraps + tail + CountWrapsBody(quanta + head, DeltaFrom(delta, head), i - head);
}

RECKON_AVX2 uint64_t AddDenseWrapping(int64_t* quanta, const char* payload, size_t n,
                                      float* weights, double quantum) {
  return weights != nullptr ? AddWrappingLanes<true>(quanta, payload, n, weights, quantum)
                            : AddWrappingLanes<false>(quanta, payload, n, nullptr, 0);
}
RECKON_AVX2 uint64_t AddWrapping(int64_t* quanta, const int64_t* delta, size_t n, float* weights,
                                 double quantum) {
  return weights != nullptr ? AddWrappingLanes<true>(quanta, delta, n, weights, quantum)
                            : AddWrappingLanes<false>(quanta, delta, n, nullptr, 0);
}

RECKON_AVX2 bool DecodeDense(const char* payload, size_t n, int64_t* quanta) {
  __m256i all_valid = _mm256_set1_epi32(-1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 4 * i));
    all_valid = _mm256_and_si256(all_valid, ValidLanes(bits));
    auto* at = reinterpret_cast<__m256i*>(quanta + i);
    _mm256_storeu_si256(at, QuantaOfFour(_mm256_castsi256_si128(bits)));
    _mm256_storeu_si256(at + 1, QuantaOfFour(_mm256_extracti128_si256(bits, 1)));
  }
  return DecodeDenseBody(payload + 4 * i, n - i, quanta + i) && AllOnes(all_valid);
}

RECKON_AVX2 bool DenseEqual(const char* payload, const int64_t* quanta, size_t n) {
  __m256i all_equal = _mm256_set1_epi32(-1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(payload + 4 * i));
    const auto* at = reinterpret_cast<const __m256i*>(quanta + i);
    const __m256i equal = _mm256_and_si256(
        _mm256_cmpeq_epi64(QuantaOfFour(_mm256_castsi256_si128(bits)), _mm256_loadu_si256(at)),
        _mm256_cmpeq_epi64(QuantaOfFour(_mm256_extracti128_si256(bits, 1)),
                           _mm256_loadu_si256(at + 1)));
    all_equal = _mm256_and_si256(all_equal, _mm256_and_si256(equal, ValidLanes(bits)));
  }
  return DenseEqualBody(payload + 4 * i, quanta + i, n - i) && AllOnes(all_equal);
}

RECKON_AVX2 void SubtractQuanta(float* residual, const int64_t* quanta, size_t n, double quantum) {
  const __m256d quantum_lanes = _mm256_set1_pd(quantum);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto* at = reinterpret_cast<const __m256i*>(quanta + i);
    const __m256 step = FloatsOf(_mm256_loadu_si256(at), _mm256_loadu_si256(at + 1), quantum_lanes);
    _mm256_storeu_ps(residual + i, _mm256_sub_ps(_mm256_loadu_ps(residual + i), step));
  }
  SubtractQuantaBody(residual + i, quanta + i, n - i, quantum);
}

RECKON_AVX2 void QuantaToFloats(const int64_t* quanta, size_t n, double quantum, float* weights) {
  const __m256d quantum_lanes = _mm256_set1_pd(quantum);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const auto* at = reinterpret_cast<const __m256i*>(quanta + i);
    _mm256_storeu_ps(weights + i,
                     FloatsOf(_mm256_loadu_si256(at), _mm256_loadu_si256(at + 1), quantum_lanes));
  }
  QuantaToFloatsBody(quanta + i, n - i, quantum, weights + i);
}

// Vectorized by gcc as they are (32-bit float lanes, compares combined as
// masks).
RECKON_AVX2 bool DenseValid(const char* payload, size_t n) { return DenseValidBody(payload, n); }
RECKON_AVX2 bool DensePayloadsEqual(const char* payload, const char* expected, size_t n) {
  return DensePayloadsEqualBody(payload, expected, n);
}
RECKON_AVX2 void SubtractDense(float* residual, const char* payload, size_t n, int fraction_bits) {
  SubtractDenseBody(residual, payload, n, fraction_bits);
}

#undef RECKON_AVX2

}  // namespace reckon::codec::elementwise_avx2

#endif  // defined(__x86_64__)
