#include "codec/quantizer.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/update_words.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace reckon::codec {
namespace {

// Reads float bit patterns in place; may_alias makes that well-defined.
using AliasedInt32 = int32_t __attribute__((may_alias));

constexpr int32_t kAbsMask = 0x7FFFFFFF;
constexpr int32_t kNonFiniteBits = 0x7F800000;  // |x| bits at or above: Inf or NaN
constexpr size_t kChunk = 64;

// Bit j of the result is set when element j of the 64 has |x| >= tau or is
// not finite. For non-negative floats the bit patterns order like the values,
// and Inf/NaN sit above every finite tau, so one integer compare per element
// covers both. The caller then visits only the set bits, so the cost of an
// emission is one iteration, not a rescan of its chunk.
// CandidateMaskScalar builds it for the first n (<= 64) elements one at a
// time (the residual's tail, and everything where SSE2 is missing);
// CandidateMask64 builds it for 64 elements with SSE2.
inline uint64_t CandidateMaskScalar(const AliasedInt32* bits, size_t n, int32_t tau_bits) {
  uint64_t mask = 0;
  for (size_t j = 0; j < n; ++j)
    mask |= static_cast<uint64_t>((bits[j] & kAbsMask) >= tau_bits) << j;
  return mask;
}

#if defined(__SSE2__)
inline uint64_t CandidateMask64(const AliasedInt32* bits, int32_t tau_bits) {
  const __m128i abs_mask = _mm_set1_epi32(kAbsMask);
  const __m128i below = _mm_set1_epi32(tau_bits - 1);  // x >= tau  <=>  x > tau - 1
  uint64_t mask = 0;
  for (int q = 0; q < 4; ++q) {
    const AliasedInt32* p = bits + 16 * q;
    __m128i c[4];
    for (int j = 0; j < 4; ++j) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * j));
      c[j] = _mm_cmpgt_epi32(_mm_and_si128(v, abs_mask), below);
    }
    // 4 x 4 lanes of 0/-1 -> 16 bytes of 0/-1 -> 16 mask bits, in order.
    const __m128i packed =
        _mm_packs_epi16(_mm_packs_epi32(c[0], c[1]), _mm_packs_epi32(c[2], c[3]));
    mask |= static_cast<uint64_t>(static_cast<uint32_t>(_mm_movemask_epi8(packed))) << (16 * q);
  }
  return mask;
}
#else
inline uint64_t CandidateMask64(const AliasedInt32* bits, int32_t tau_bits) {
  return CandidateMaskScalar(bits, kChunk, tau_bits);
}
#endif

absl::Status CheckQuantizeArguments(size_t n, const ThresholdStep& step) {
  if (n > kMaxParamCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual has ", n, " elements, more than 2^31"));
  }
  if (step.step_quanta <= 0 || !(step.tau > 0) || !std::isfinite(step.tau)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "threshold step ", step.step_quanta, " quanta (tau ", step.tau, ") must be positive"));
  }
  return absl::OkStatus();
}

// The candidates of one chunk (`mask`, from its base) as words; false at
// the first that is not finite, its index in *bad.
inline bool EmitCandidates(const AliasedInt32* bits, size_t base, uint64_t mask,
                           std::vector<uint32_t>* words, size_t* bad) {
  while (mask != 0) {
    const size_t j = base + static_cast<size_t>(std::countr_zero(mask));
    mask &= mask - 1;
    if ((bits[j] & kAbsMask) >= kNonFiniteBits) [[unlikely]] {
      *bad = j;
      return false;
    }
    words->push_back(PackUpdate(static_cast<uint32_t>(j), bits[j] < 0));
  }
  return true;
}

inline uint64_t CandidateMask(const AliasedInt32* bits, size_t base, size_t n, int32_t tau_bits) {
  return n - base >= kChunk ? CandidateMask64(bits + base, tau_bits)
                            : CandidateMaskScalar(bits + base, n - base, tau_bits);
}

absl::Status NonFiniteResidual(float value, size_t index) {
  return absl::InvalidArgumentError(
      absl::StrCat("residual element ", index, " is ", std::isnan(value) ? "NaN" : "infinite",
                   "; nothing was emitted (diverged training? lower the learning rate)"));
}

// Subtracts exactly what was emitted (sparse).
void SubtractEmitted(const std::vector<uint32_t>& words, float tau, float* r) {
  for (const uint32_t w : words) {
    const uint32_t index = UpdateIndex(w);
    r[index] = UpdateIsNegative(w) ? r[index] + tau : r[index] - tau;
  }
}

}  // namespace

absl::Status QuantizeResidual(std::span<float> residual, const ThresholdStep& step,
                              std::vector<uint32_t>* words) {
  words->clear();
  RECKON_RETURN_IF_ERROR(CheckQuantizeArguments(residual.size(), step));
  const int32_t tau_bits = std::bit_cast<int32_t>(step.tau);
  static_assert(sizeof(float) == sizeof(int32_t));
  const auto* bits = reinterpret_cast<const AliasedInt32*>(residual.data());
  const size_t n = residual.size();
  // Pass 1: find emitted elements, read-only, so that a NaN found late leaves
  // the residual untouched.
  for (size_t base = 0; base < n; base += kChunk) {
    size_t bad = 0;
    if (!EmitCandidates(bits, base, CandidateMask(bits, base, n, tau_bits), words, &bad)) {
      words->clear();
      return NonFiniteResidual(residual[bad], bad);
    }
  }
  // Pass 2: subtract exactly what was emitted (sparse).
  SubtractEmitted(*words, step.tau, residual.data());
  return absl::OkStatus();
}

absl::Status AddDifferenceAndQuantize(std::span<float> residual, std::span<const float> params,
                                      std::span<const float> replica, const ThresholdStep& step,
                                      std::vector<uint32_t>* words) {
  words->clear();
  RECKON_RETURN_IF_ERROR(CheckQuantizeArguments(residual.size(), step));
  if (params.size() != residual.size() || replica.size() != residual.size()) {
    return absl::InvalidArgumentError(absl::StrCat("residual of ", residual.size(), ", ",
                                                   params.size(), " parameters and a replica of ",
                                                   replica.size()));
  }
  const int32_t tau_bits = std::bit_cast<int32_t>(step.tau);
  const auto* bits = reinterpret_cast<const AliasedInt32*>(residual.data());
  float* r = residual.data();
  const float* p = params.data();
  const float* w = replica.data();
  const size_t n = residual.size();
  // One pass: each chunk's sums, then its candidates while they are in
  // cache. After a non-finite sum the rest is only added (the residual
  // then holds every sum, as after the add alone) and nothing is emitted.
  size_t bad = n;
  for (size_t base = 0; base < n; base += kChunk) {
    const size_t end = std::min(n, base + kChunk);
    for (size_t i = base; i < end; ++i) r[i] += p[i] - w[i];
    if (bad == n &&
        !EmitCandidates(bits, base, CandidateMask(bits, base, n, tau_bits), words, &bad)) {
      words->clear();
    }
  }
  if (bad != n) return NonFiniteResidual(r[bad], bad);
  SubtractEmitted(*words, step.tau, r);
  return absl::OkStatus();
}

size_t FirstNonFinite(std::span<const float> values) {
  const auto* bits = reinterpret_cast<const AliasedInt32*>(values.data());
  constexpr size_t kScan = 256;
  for (size_t base = 0; base < values.size(); base += kScan) {
    const size_t end = std::min(values.size(), base + kScan);
    // Branch-free over the chunk (it vectorizes); the index only when found.
    int32_t any = 0;
    for (size_t i = base; i < end; ++i) any |= (bits[i] & kAbsMask) >= kNonFiniteBits;
    if (any != 0) {
      for (size_t i = base; i < end; ++i) {
        if ((bits[i] & kAbsMask) >= kNonFiniteBits) return i;
      }
    }
  }
  return values.size();
}

}  // namespace reckon::codec
