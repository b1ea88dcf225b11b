#include "codec/weight_checksum.h"

#include <bit>
#include <cstring>
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

// OfBody over a checked dense payload's values (quanta_span.h), converted
// as they are read (vcvttps2qq with AVX-512DQ).
[[gnu::always_inline]] inline uint64_t OfDenseBody(const WeightChecksum& c,
                                                   const char* __restrict payload, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; ++i) {
    float v;
    std::memcpy(&v, payload + 4 * i, 4);  // little-endian hosts only (static_assert below)
    sum += c.Coefficient(i) * static_cast<uint64_t>(static_cast<int64_t>(v));
  }
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
uint64_t OfDensePortable(const WeightChecksum& c, const char* payload, size_t n) {
  return OfDenseBody(c, payload, n);
}
uint64_t SignedSumPortable(const WeightChecksum& c, const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) uint64_t OfAvx2(const WeightChecksum& c, const int64_t* quanta,
                                                size_t n) {
  return OfBody(c, quanta, n);
}
__attribute__((target("avx2"))) uint64_t OfDenseAvx2(const WeightChecksum& c, const char* payload,
                                                     size_t n) {
  return OfDenseBody(c, payload, n);
}
__attribute__((target("avx2"))) uint64_t SignedSumAvx2(const WeightChecksum& c,
                                                       const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}
#define RECKON_AVX512 __attribute__((target("avx512f,avx512dq,avx512vl,avx512bw")))
RECKON_AVX512 uint64_t OfAvx512(const WeightChecksum& c, const int64_t* quanta, size_t n) {
  return OfBody(c, quanta, n);
}
RECKON_AVX512 uint64_t OfDenseAvx512(const WeightChecksum& c, const char* payload, size_t n) {
  return OfDenseBody(c, payload, n);
}
RECKON_AVX512 uint64_t SignedSumAvx512(const WeightChecksum& c, const uint32_t* words, size_t n) {
  return SignedSumBody(c, words, n);
}
#undef RECKON_AVX512
#endif

}  // namespace

uint64_t WeightChecksum::Of(QuantaSpan counts, Isa isa) const {
  static_assert(std::endian::native == std::endian::little,
                "OfDenseBody reads the payload's little-endian floats as they lie");
  const size_t n = counts.size();
  if (counts.is_dense_fp32()) {
    const char* payload = counts.dense_fp32_bytes();
#if defined(__x86_64__)
    if (isa == Isa::kBest && Avx512Available()) return OfDenseAvx512(*this, payload, n);
    if (isa != Isa::kPortable && Avx2Available()) return OfDenseAvx2(*this, payload, n);
#endif
    return OfDensePortable(*this, payload, n);
  }
#if defined(__x86_64__)
  if (isa == Isa::kBest && Avx512Available()) return OfAvx512(*this, counts.int64s(), n);
  if (isa != Isa::kPortable && Avx2Available()) return OfAvx2(*this, counts.int64s(), n);
#endif
  return OfPortable(*this, counts.int64s(), n);
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
