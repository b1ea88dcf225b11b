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

namespace {

// The bodies, inlined into each copy below. Plain loops over one sum (the
// sum is mod 2^64, so any order gives the same bits): gcc vectorizes them
// with AVX2 (each 64-bit multiply from 32-bit ones) and AVX-512DQ (vpmullq).
// At Strom's 44,000 words a message, on an AMD EPYC (Zen 5) VM: 2.38
// ns a word for any x86-64, 1.56 with AVX2, 0.18 with AVX-512.
[[gnu::always_inline]] inline uint64_t OfBody(const WeightChecksum& c,
                                              const int64_t* __restrict quanta, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) sum += c.Coefficient(i) * static_cast<uint64_t>(quanta[i]);
  return sum;
}

// sum of +-step C(i) = step x (sum of +-C(i)), mod 2^64: one multiply by the
// step a message, not one an update, and the sign a branch-free negation
// (the node validates every peer's message with this: it was 47% of a
// receive thread's samples at Strom's size, `perf record` of `reckonctl
// bench inbound --paths gpu-host`, before it was vectorized).
[[gnu::always_inline]] inline uint64_t SignedSumBody(const WeightChecksum& c,
                                                     const uint32_t* __restrict words, size_t n) {
  uint64_t signed_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t w = words[i];
    const uint64_t negative = 0 - static_cast<uint64_t>(w >> 31);  // all ones, or zero
    signed_sum += (c.Coefficient(w & 0x7FFFFFFFu) ^ negative) - negative;
  }
  return signed_sum;
}

uint64_t OfPortable(const WeightChecksum& c, const int64_t* quanta, size_t n) {
  return OfBody(c, quanta, n);
}
uint64_t SignedSumPortable(const WeightChecksum& c, const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t OfAvx2(const WeightChecksum& c, const int64_t* quanta,
                                                size_t n) {
  return OfBody(c, quanta, n);
}
__attribute__((target("avx2"))) uint64_t SignedSumAvx2(const WeightChecksum& c,
                                                       const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}
#define RECKON_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
RECKON_AVX512 uint64_t OfAvx512(const WeightChecksum& c, const int64_t* quanta, size_t n) {
  return OfBody(c, quanta, n);
}
RECKON_AVX512 uint64_t SignedSumAvx512(const WeightChecksum& c, const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}
#undef RECKON_AVX512
#endif

}  // namespace

uint64_t WeightChecksum::Of(std::span<const int64_t> quanta, Isa isa) const {
#if defined(__x86_64__)
  if (isa == Isa::kBest && Avx512Available()) return OfAvx512(*this, quanta.data(), quanta.size());
  if (isa != Isa::kPortable && Avx2Available()) return OfAvx2(*this, quanta.data(), quanta.size());
#endif
  return OfPortable(*this, quanta.data(), quanta.size());
}

uint64_t WeightChecksum::OfUpdate(int64_t step_quanta, std::span<const uint32_t> words,
                                  Isa isa) const {
  uint64_t signed_sum;
#if defined(__x86_64__)
  if (isa == Isa::kBest && Avx512Available()) {
    signed_sum = SignedSumAvx512(*this, words.data(), words.size());
  } else if (isa != Isa::kPortable && Avx2Available()) {
    signed_sum = SignedSumAvx2(*this, words.data(), words.size());
  } else
#endif
  {
    signed_sum = SignedSumPortable(*this, words.data(), words.size());
  }
  return signed_sum * static_cast<uint64_t>(step_quanta);
}

std::string ChecksumHex(uint64_t checksum) { return absl::StrFormat("%016x", checksum); }

}  // namespace reckon::codec
