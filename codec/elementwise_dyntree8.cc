// dyntree8's encode loop (elementwise.h DynTreeEncodeValues) in its three
// copies (any x86-64, AVX2, AVX-512; elementwise.h says why all give the
// same bits), and the nearest-code search it shares with the scalar definition
// (codec.h DynTreeNearestCode). Apart from elementwise.cc: its own tables
// and its own copy in intrinsics.
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
#include "codec/elementwise.h"

namespace reckon::codec {

namespace {

// Midpoints between consecutive dyntree magnitudes, as doubles, for the
// nearest-code search (only the encoder uses doubles; decoding is exact
// integers), padded with two that no number is below.
struct DynTreeSearch {
  static constexpr int kLowestExponent = -22;  // 2^-22 < mids[0] = 2.75e-7
  static constexpr int kMantissaBits = 5;      // sub-buckets of a binade: 32
  std::array<double, 129> mids;
  static constexpr size_t kBuckets = size_t{-kLowestExponent} << kMantissaBits;
  // For each bucket (a binade from 2^-22 to 1, cut in 32 by the top mantissa
  // bits): how many midpoints lie below its first number (32-bit entries, so
  // that the AVX-512 copy gathers them), and the next two midpoints
  // (mids[below], mids[below + 1]), read by the bucket too: three loads side
  // by side, not a load of `below` and two that wait for it.
  std::array<uint32_t, kBuckets> below;
  std::array<double, kBuckets> next_mid, second_mid;
};

const DynTreeSearch& DynTreeSearchTables() {
  static const DynTreeSearch tables = [] {
    DynTreeSearch t{};
    std::array<double, 128> mag{};
    for (uint32_t m = 0; m < 128; ++m) {
      const DynTreeFraction f = DynTreeMagnitude(m);
      mag[m] = static_cast<double>(f.numerator) / static_cast<double>(f.denominator);
    }
    for (int j = 0; j < 127; ++j) t.mids[j] = 0.5 * (mag[j] + mag[j + 1]);
    t.mids[127] = t.mids[128] = std::numeric_limits<double>::infinity();
    for (size_t b = 0; b < t.below.size(); ++b) {
      const int exponent = DynTreeSearch::kLowestExponent + int(b >> DynTreeSearch::kMantissaBits);
      const double first = std::ldexp(1.0 + double(b & ((1u << DynTreeSearch::kMantissaBits) - 1)) /
                                                double(1u << DynTreeSearch::kMantissaBits),
                                      exponent);
      t.below[b] = static_cast<uint32_t>(
          std::lower_bound(t.mids.begin(), t.mids.begin() + 127, first) - t.mids.begin());
      t.next_mid[b] = t.mids[t.below[b]];
      t.second_mid[b] = t.mids[t.below[b] + 1];
    }
    return t;
  }();
  return tables;
}

// How many midpoints lie below `normalized` (std::lower_bound's answer),
// without a search: the double's exponent and top mantissa bits pick a
// bucket that holds at most two midpoints (the codes are 0.014 apart at
// most, in the top decade; a bucket of the top binade is 0.0156 wide), and
// two compares finish it (a binary search over the 127 midpoints took half
// a dyntree8 worker's step). Branch-free, in masks: below 2^-22 (NaN too)
// it is 0, from 1 on 127, and the bucket read for those is bucket 0's.
[[gnu::always_inline]] inline uint32_t NearestCodeBody(const DynTreeSearch& t, double normalized) {
  constexpr double kLowest = 1.0 / double(uint64_t{1} << -DynTreeSearch::kLowestExponent);
  const uint64_t bits = std::bit_cast<uint64_t>(normalized);
  const uint64_t in_range = uint64_t(normalized >= kLowest) & uint64_t(normalized < 1.0);
  // The biased exponent and top mantissa bits, from 2^-22's bucket on.
  constexpr uint64_t kFirstBucket = uint64_t(1023 + DynTreeSearch::kLowestExponent)
                                    << DynTreeSearch::kMantissaBits;
  const uint64_t bucket =
      ((bits >> (52 - DynTreeSearch::kMantissaBits)) - kFirstBucket) & (uint64_t{0} - in_range);
  const uint32_t found = t.below[bucket] + static_cast<uint32_t>(t.next_mid[bucket] < normalized) +
                         static_cast<uint32_t>(t.second_mid[bucket] < normalized);
  return (found & (0u - static_cast<uint32_t>(in_range))) |
         (127u & (0u - static_cast<uint32_t>(normalized >= 1.0)));
}

// The sign by a mask, not a branch on each value's sign (a coin toss for the
// branch predictor).
[[gnu::always_inline]] inline void DynTreeEncodeBody(const float* __restrict values, size_t n,
                                                     double to_normalized,
                                                     const int64_t* __restrict magnitudes,
                                                     char* __restrict codes,
                                                     int64_t* __restrict quanta) {
  const DynTreeSearch& t = DynTreeSearchTables();
  for (size_t i = 0; i < n; ++i) {
    const float v = values[i];
    const uint32_t m = NearestCodeBody(t, std::fabs(double(v)) * to_normalized);
    const uint32_t negative = static_cast<uint32_t>(v < 0) & static_cast<uint32_t>(m != 0);
    codes[i] = static_cast<char>((negative << 7) | m);
    const int64_t sign_mask = -static_cast<int64_t>(negative);
    quanta[i] = (magnitudes[m] ^ sign_mask) - sign_mask;
  }
}

void DynTreeEncodePortable(const float* values, size_t n, double to_normalized,
                           const int64_t* magnitudes, char* codes, int64_t* quanta) {
  DynTreeEncodeBody(values, n, to_normalized, magnitudes, codes, quanta);
}

#if defined(__x86_64__)
#define RECKON_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
// GCC 12 warns that the intrinsics' own _mm512_undefined_*() sources "may be
// used uninitialized": a false positive from its headers.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
// The dyntree8 encode in intrinsics: gcc vectorizes the body above only
// with its gathers emulated lane by lane (`-fopt-info-vec`; no gather
// instruction in the object), which was slower than the scalar loop. The
// same operations, eight values at a time: the float widened to a double
// exactly, |x| * to_normalized rounded once, the compares ordered (NaN
// false) as the body's; the tail is the body's.
RECKON_AVX512 void DynTreeEncodeAvx512(const float* values, size_t n, double to_normalized,
                                       const int64_t* magnitudes, char* codes, int64_t* quanta) {
  const DynTreeSearch& t = DynTreeSearchTables();
  constexpr double kLowest = 1.0 / double(uint64_t{1} << -DynTreeSearch::kLowestExponent);
  constexpr int64_t kFirstBucket = int64_t{1023 + DynTreeSearch::kLowestExponent}
                                   << DynTreeSearch::kMantissaBits;
  const __m512d scale = _mm512_set1_pd(to_normalized);
  const __m512d lowest = _mm512_set1_pd(kLowest);
  const __m512d one = _mm512_set1_pd(1.0);
  const __m512i first_bucket = _mm512_set1_epi64(kFirstBucket);
  const __m512i int_one = _mm512_set1_epi64(1);
  const __m512i top_code = _mm512_set1_epi64(127);
  const __m512i sign_bit = _mm512_set1_epi64(128);
  const __m512i zero = _mm512_setzero_si512();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(values + i);
    const __m512d x = _mm512_mul_pd(_mm512_abs_pd(_mm512_cvtps_pd(v)), scale);
    const __mmask8 in_range =
        _mm512_cmp_pd_mask(x, lowest, _CMP_GE_OQ) & _mm512_cmp_pd_mask(x, one, _CMP_LT_OQ);
    const __mmask8 at_top = _mm512_cmp_pd_mask(x, one, _CMP_GE_OQ);
    const __m512i bucket = _mm512_maskz_sub_epi64(
        in_range, _mm512_srli_epi64(_mm512_castpd_si512(x), 52 - DynTreeSearch::kMantissaBits),
        first_bucket);
    const __m512i lo = _mm512_cvtepu32_epi64(_mm512_i64gather_epi32(bucket, t.below.data(), 4));
    const __m512d mid_lo = _mm512_i64gather_pd(bucket, t.next_mid.data(), 8);
    const __m512d mid_hi = _mm512_i64gather_pd(bucket, t.second_mid.data(), 8);
    __m512i m = _mm512_mask_add_epi64(lo, _mm512_cmp_pd_mask(mid_lo, x, _CMP_LT_OQ), lo, int_one);
    m = _mm512_mask_add_epi64(m, _mm512_cmp_pd_mask(mid_hi, x, _CMP_LT_OQ), m, int_one);
    m = _mm512_mask_mov_epi64(_mm512_maskz_mov_epi64(in_range, m), at_top, top_code);
    const __mmask8 negative =
        _mm256_cmp_ps_mask(v, _mm256_setzero_ps(), _CMP_LT_OQ) & _mm512_test_epi64_mask(m, m);
    const __m128i code_bytes = _mm512_cvtepi64_epi8(_mm512_mask_or_epi64(m, negative, m, sign_bit));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), code_bytes);
    const __m512i magnitude = _mm512_i64gather_epi64(m, magnitudes, 8);
    _mm512_storeu_si512(quanta + i, _mm512_mask_sub_epi64(magnitude, negative, zero, magnitude));
  }
  DynTreeEncodeBody(values + i, n - i, to_normalized, magnitudes, codes + i, quanta + i);
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#undef RECKON_AVX512

// The same operations four values at a time in AVX2 (a CPU without AVX-512
// ran the portable loop, about 4.3x this copy's time on one 4,096-value
// block: tests/bench/round_trip_passes.cc, docs/benchmarks.md): its
// compares give all-ones lanes, so a true compare adds one by subtracting
// its mask, and the four codes' low bytes are gathered into one 32-bit
// store. The tail is the body's.
__attribute__((target("avx2"))) void DynTreeEncodeAvx2(const float* values, size_t n,
                                                       double to_normalized,
                                                       const int64_t* magnitudes, char* codes,
                                                       int64_t* quanta) {
  const DynTreeSearch& t = DynTreeSearchTables();
  constexpr double kLowest = 1.0 / double(uint64_t{1} << -DynTreeSearch::kLowestExponent);
  constexpr int64_t kFirstBucket = int64_t{1023 + DynTreeSearch::kLowestExponent}
                                   << DynTreeSearch::kMantissaBits;
  const __m256d scale = _mm256_set1_pd(to_normalized);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(INT64_MAX));
  const __m256d lowest = _mm256_set1_pd(kLowest);
  const __m256d one = _mm256_set1_pd(1.0);
  const __m256d zero_pd = _mm256_setzero_pd();
  const __m256i first_bucket = _mm256_set1_epi64x(kFirstBucket);
  const __m256i top_code = _mm256_set1_epi64x(127);
  const __m256i sign_bit = _mm256_set1_epi64x(128);
  const __m256i zero = _mm256_setzero_si256();
  // Each 64-bit lane's low 32 bits into the low half, then their low bytes.
  const __m256i low_dwords = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m128i low_bytes =
      _mm_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const __m256d v = _mm256_cvtps_pd(_mm_loadu_ps(values + i));  // exact
    const __m256d x = _mm256_mul_pd(_mm256_and_pd(v, abs_mask), scale);
    const __m256i in_range = _mm256_castpd_si256(
        _mm256_and_pd(_mm256_cmp_pd(x, lowest, _CMP_GE_OQ), _mm256_cmp_pd(x, one, _CMP_LT_OQ)));
    const __m256i at_top = _mm256_castpd_si256(_mm256_cmp_pd(x, one, _CMP_GE_OQ));
    const __m256i bucket = _mm256_and_si256(
        in_range, _mm256_sub_epi64(
                      _mm256_srli_epi64(_mm256_castpd_si256(x), 52 - DynTreeSearch::kMantissaBits),
                      first_bucket));
    const __m256i lo = _mm256_cvtepu32_epi64(
        _mm256_i64gather_epi32(reinterpret_cast<const int*>(t.below.data()), bucket, 4));
    const __m256d mid_lo = _mm256_i64gather_pd(t.next_mid.data(), bucket, 8);
    const __m256d mid_hi = _mm256_i64gather_pd(t.second_mid.data(), bucket, 8);
    __m256i m = _mm256_sub_epi64(lo, _mm256_castpd_si256(_mm256_cmp_pd(mid_lo, x, _CMP_LT_OQ)));
    m = _mm256_sub_epi64(m, _mm256_castpd_si256(_mm256_cmp_pd(mid_hi, x, _CMP_LT_OQ)));
    m = _mm256_or_si256(_mm256_and_si256(m, in_range), _mm256_and_si256(top_code, at_top));
    const __m256i negative = _mm256_andnot_si256(
        _mm256_cmpeq_epi64(m, zero), _mm256_castpd_si256(_mm256_cmp_pd(v, zero_pd, _CMP_LT_OQ)));
    const __m256i code = _mm256_or_si256(m, _mm256_and_si256(negative, sign_bit));
    const __m128i code_bytes = _mm_shuffle_epi8(
        _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(code, low_dwords)), low_bytes);
    const int32_t four_codes = _mm_cvtsi128_si32(code_bytes);
    std::memcpy(codes + i, &four_codes, 4);
    const __m256i magnitude =
        _mm256_i64gather_epi64(reinterpret_cast<const long long*>(magnitudes), m, 8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(quanta + i),
                        _mm256_sub_epi64(_mm256_xor_si256(magnitude, negative), negative));
  }
  DynTreeEncodeBody(values + i, n - i, to_normalized, magnitudes, codes + i, quanta + i);
}
#endif

}  // namespace

void DynTreeEncodeValues(const float* values, size_t n, double to_normalized,
                         const int64_t* magnitudes, char* codes, int64_t* quanta, Isa isa) {
#if defined(__x86_64__)
  if (UseAvx512(isa))
    return DynTreeEncodeAvx512(values, n, to_normalized, magnitudes, codes, quanta);
  if (UseAvx2(isa)) return DynTreeEncodeAvx2(values, n, to_normalized, magnitudes, codes, quanta);
#endif
  DynTreeEncodePortable(values, n, to_normalized, magnitudes, codes, quanta);
}

uint32_t DynTreeNearestCode(double normalized) {
  return NearestCodeBody(DynTreeSearchTables(), normalized);
}

const double* DynTreeMidpoints() { return DynTreeSearchTables().mids.data(); }

}  // namespace reckon::codec
