#include "codec/quantizer.h"

#include <bit>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "codec/update_words.h"

namespace reckon::codec {
namespace {

// Reads float bit patterns in place; may_alias makes that well-defined.
using AliasedInt32 = int32_t __attribute__((may_alias));

constexpr int32_t kNonFiniteBits = 0x7F800000;  // |x| bits at or above: Inf or NaN
constexpr size_t kBlock = 64;

// True when some element of the block has |x| >= tau or is not finite. For
// non-negative floats the bit patterns order like the values, and Inf/NaN sit
// above every finite tau, so one integer compare per element covers both.
// Written as a branch-free OR so that the compiler vectorizes it.
inline bool BlockHasCandidate(const AliasedInt32* bits, size_t n, int32_t tau_bits) {
  int32_t any = 0;
  for (size_t j = 0; j < n; ++j) any |= static_cast<int32_t>((bits[j] & 0x7FFFFFFF) >= tau_bits);
  return any != 0;
}

}  // namespace

absl::Status QuantizeResidual(std::span<float> residual, const ThresholdStep& step,
                              std::vector<uint32_t>* words) {
  words->clear();
  if (residual.size() > kMaxParamCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("residual has ", residual.size(), " elements, more than 2^31"));
  }
  if (step.step_quanta <= 0 || !(step.tau > 0) || !std::isfinite(step.tau)) {
    return absl::InvalidArgumentError(
        absl::StrCat("threshold step ", step.step_quanta, " quanta (tau ", step.tau,
                     ") must be positive"));
  }
  const int32_t tau_bits = std::bit_cast<int32_t>(step.tau);
  static_assert(sizeof(float) == sizeof(int32_t));
  const auto* bits = reinterpret_cast<const AliasedInt32*>(residual.data());
  const size_t n = residual.size();

  // Pass 1: find emitted elements, read-only, so that a NaN found late leaves
  // the residual untouched.
  for (size_t base = 0; base < n; base += kBlock) {
    const size_t len = std::min(kBlock, n - base);
    if (!BlockHasCandidate(bits + base, len, tau_bits)) [[likely]] continue;
    for (size_t j = base; j < base + len; ++j) {
      const int32_t magnitude = bits[j] & 0x7FFFFFFF;
      if (magnitude < tau_bits) continue;
      if (magnitude >= kNonFiniteBits) {
        words->clear();
        return absl::InvalidArgumentError(absl::StrCat(
            "residual element ", j, " is ", std::isnan(residual[j]) ? "NaN" : "infinite",
            "; nothing was emitted (diverged training? lower the learning rate)"));
      }
      words->push_back(PackUpdate(static_cast<uint32_t>(j), bits[j] < 0));
    }
  }
  // Pass 2: subtract exactly what was emitted (sparse).
  float* r = residual.data();
  const float tau = step.tau;
  for (const uint32_t w : *words) {
    const uint32_t index = UpdateIndex(w);
    r[index] = UpdateIsNegative(w) ? r[index] + tau : r[index] - tau;
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec
