#include "codec/weight_checksum.h"

#include <string>

#include "absl/strings/str_format.h"
#include "codec/fixed_point.h"

namespace reckon::codec {

namespace {
// Domain separation: the checksum key is not the initializer's stream.
constexpr uint64_t kChecksumDomain = 0x636865636b73756dull;  // "checksum"
}  // namespace

WeightChecksum::WeightChecksum(uint64_t cluster_seed)
    : key_(SplitMix64(cluster_seed ^ kChecksumDomain).Next()) {}

uint64_t WeightChecksum::Of(std::span<const int64_t> quanta) const {
  // Four independent sums so the multiplies of neighbouring elements overlap.
  uint64_t sum[4] = {0, 0, 0, 0};
  const size_t n = quanta.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (size_t k = 0; k < 4; ++k) {
      sum[k] += Coefficient(i + k) * static_cast<uint64_t>(quanta[i + k]);
    }
  }
  for (; i < n; ++i) sum[0] += Coefficient(i) * static_cast<uint64_t>(quanta[i]);
  return sum[0] + sum[1] + sum[2] + sum[3];
}

uint64_t WeightChecksum::OfUpdate(int64_t step_quanta, std::span<const uint32_t> words) const {
  // sum of +-step C(i) = step x (sum of +-C(i)), mod 2^64: one multiply by
  // the step a message, not one an update, and the sign a branch-free
  // negation (the node validates every peer's message with this: it was
  // 47% of a receive thread's samples at Strom's size, `perf record` of
  // `reckonctl bench inbound --paths gpu-host`).
  uint64_t signed_sum = 0;
  for (uint32_t w : words) {
    const uint64_t negative = 0 - static_cast<uint64_t>(w >> 31);  // all ones, or zero
    signed_sum += (Coefficient(w & 0x7FFFFFFFu) ^ negative) - negative;
  }
  return signed_sum * static_cast<uint64_t>(step_quanta);
}

std::string ChecksumHex(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

}  // namespace reckon::codec
