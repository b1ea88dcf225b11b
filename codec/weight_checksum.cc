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
  const uint64_t plus = static_cast<uint64_t>(step_quanta);
  const uint64_t minus = 0 - plus;  // two's complement: -step_quanta mod 2^64
  uint64_t sum = 0;
  for (uint32_t w : words) {
    sum += Coefficient(w & 0x7FFFFFFFu) * ((w >> 31) != 0 ? minus : plus);
  }
  return sum;
}

std::string ChecksumHex(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

}  // namespace reckon::codec
