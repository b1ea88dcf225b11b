// The replica checksum (docs/gossip.md "Divergence detection"): a seeded
// linear function of the fixed-point weights,
//
//   C(w) = sum_i r_i * w_i  (mod 2^64),
//
// where r_0, r_1, ... are the outputs of SplitMix64 seeded with
// key = SplitMix64(cluster_seed ^ 0x636865636b73756d).Next() (r_i is computed
// directly: the finalizer of key + (i+1) * 0x9E3779B97F4A7C15), and w_i is
// the int64 quanta read as uint64. Every member uses the same coefficients. Linearity is the point: C(w + d) = C(w) + C(d), so the
// checksum a replica must have is the initial one plus the contribution of
// every message it applied, and each message's contribution is computed from
// its words alone (O(count), not O(param_count)). Two different weight
// vectors collide with probability about 2^-64 over the seed (2^-(64-k) when
// every difference is a multiple of 2^k). Not a MAC: anyone who knows the
// seed can construct collisions; signed updates defend against forgers.
//
// Thread-safe (immutable after construction).
#ifndef RECKON_CODEC_WEIGHT_CHECKSUM_H_
#define RECKON_CODEC_WEIGHT_CHECKSUM_H_

#include <cstdint>
#include <span>
#include <string>

#include "codec/elementwise.h"  // Isa
#include "codec/quanta_span.h"

namespace reckon::codec {

class WeightChecksum {
 public:
  explicit WeightChecksum(uint64_t cluster_seed);

  // The coefficient of parameter `index`.
  [[gnu::always_inline]] uint64_t Coefficient(uint64_t index) const {
    uint64_t z = key_ + (index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // C(w) of a whole replica, or C(d) of a quanta codec's update (either
  // layout, quanta_span.h): O(param_count).
  uint64_t Of(QuantaSpan counts, Isa isa = Isa::kBest) const;
  // C(d) of a threshold update (docs/wire.md 3): +-step_quanta at each word's
  // index. Words past param_count are the decoder's business, not checked.
  // The node computes it for every message it takes in: compiled for any
  // x86-64, AVX2 and AVX-512 (the three 64-bit multiplies of a coefficient
  // vectorize; elementwise.h's Isa picks the copy, the tests compare them).
  uint64_t OfUpdate(int64_t step_quanta, std::span<const uint32_t> words,
                    Isa isa = Isa::kBest) const;

 private:
  uint64_t key_;
};

// Lower-case hex of a checksum, 16 digits (logs, status, JSON).
std::string ChecksumHex(uint64_t checksum);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_WEIGHT_CHECKSUM_H_
