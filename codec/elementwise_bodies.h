// The elementwise passes' loop bodies (elementwise.h), inlined into each
// copy of a pass: the portable and AVX-512 copies (elementwise.cc) and the
// AVX2 copies (elementwise_avx2.cc), so that every copy computes the same
// bits from one definition. Included only by codec/elementwise*.cc.
// Threads: pure functions of their arguments; any thread.
#ifndef RECKON_CODEC_ELEMENTWISE_BODIES_H_
#define RECKON_CODEC_ELEMENTWISE_BODIES_H_

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "codec/codec.h"

namespace reckon::codec::elementwise_bodies {

// Branch-free on purpose: a
// select vectorizes where a branch on each value's magnitude would not.

[[gnu::always_inline]] inline void EncodeDenseBody(const float* __restrict values, size_t n,
                                                   int fraction_bits, char* __restrict payload) {
  // values[i] * 2^fb in float is exactly the double product rounded to
  // float (a power of two scales exactly; no underflow since fb >= 0, and
  // an overflow is infinite both ways), as QuantaPayloadValue computes it.
  const float scale = std::bit_cast<float>(static_cast<uint32_t>(127 + fraction_bits) << 23);
  constexpr float kLargest =
      std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta)) - 1);
  constexpr float kMax = static_cast<float>(kMaxPayloadQuanta);
  for (size_t i = 0; i < n; ++i) {
    const float x = values[i] * scale;
    const float magnitude = std::fabs(x);
    // RoundToNearestEven: below 2^23 adding and taking away 2^23 rounds;
    // from 2^23 on every float is an integer already (and NaN stays NaN).
    const float rounded = magnitude < 0x1p23f ? (magnitude + 0x1p23f) - 0x1p23f : magnitude;
    const float clamped = rounded < kMax ? rounded : kLargest;  // NaN and Inf too
    const float v = std::copysign(clamped, x);
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(payload + 4 * i, &bits, 4);
    } else {
      for (int b = 0; b < 4; ++b) payload[4 * i + b] = static_cast<char>(bits >> (8 * b));
    }
  }
}

[[gnu::always_inline]] inline uint32_t LoadPayloadBits(const char* at) {
  uint32_t bits;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&bits, at, 4);
  } else {
    bits = 0;
    for (int b = 0; b < 4; ++b) bits |= uint32_t(uint8_t(at[b])) << (8 * b);
  }
  return bits;
}

// The quanta of the payload value with these bits, and in *valid (0 or 1)
// whether it is one: below 2^62 in magnitude (compared as bits: NaN's are
// above) it converts exactly by truncation, and is integral exactly when
// the truncation converts back to it (-0 to +0 included). Where it is not,
// it is 0. In integer masks and float compares only, no branch, no select
// on a float and no call (std::trunc is a libm call on x86-64 before
// SSE4.1): gcc vectorizes the loops below with AVX-512 (a ternary on the
// float here compiled to a branch per value, and the decode stayed scalar).
[[gnu::always_inline]] inline int64_t PayloadQuanta(uint32_t bits, uint32_t* valid) {
  constexpr uint32_t kMaxBits = std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta));
  const uint32_t in_range = (bits & 0x7fffffffu) < kMaxBits;
  const float v = std::bit_cast<float>(bits & (0u - in_range));
  const int64_t q = static_cast<int64_t>(v);
  *valid = in_range & uint32_t(static_cast<float>(q) == v);
  return q;
}

[[gnu::always_inline]] inline bool DecodeDenseBody(const char* __restrict payload, size_t n,
                                                   int64_t* __restrict quanta) {
  uint32_t all_valid = 1;
  for (size_t i = 0; i < n; ++i) {
    uint32_t valid;
    quanta[i] = PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid);
    all_valid &= valid;
  }
  return all_valid != 0;
}

[[gnu::always_inline]] inline bool DenseEqualBody(const char* __restrict payload,
                                                  const int64_t* __restrict quanta, size_t n) {
  uint32_t all_equal = 1;
  for (size_t i = 0; i < n; ++i) {
    uint32_t valid;
    const int64_t q = PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid);
    all_equal &= valid & uint32_t(q == quanta[i]);
  }
  return all_equal != 0;
}

// PayloadQuanta's *valid alone, in 32-bit lanes: no conversion to int64,
// which takes two conversions each way for every 16 values (the walk so
// took 357 ns for a 16 KB block in the L1 cache, twice the encode that
// wrote it: compute, not bytes). Below 2^62 (as bits, NaN above) and
// integral: from 2^23 on every float is; below it, adding and taking away
// 2^23 rounds to the nearest integer (round to nearest, the default mode,
// as the encoder's rounding), which gives the value back exactly when it
// is one (-0 is +0's magnitude; a subnormal rounds to 0 and is refused).
// The three tests are masks combined, not a select on a float, so it
// vectorizes 16 values an instruction (Elementwise tests hold it to
// PayloadQuanta).
[[gnu::always_inline]] inline uint32_t PayloadValueValid(uint32_t bits) {
  constexpr uint32_t kMaxBits = std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta));
  const uint32_t magnitude_bits = bits & 0x7fffffffu;
  const float magnitude = std::bit_cast<float>(magnitude_bits);
  const float rounded = (magnitude + 0x1p23f) - 0x1p23f;
  return uint32_t(magnitude_bits < kMaxBits) &
         (uint32_t(magnitude >= 0x1p23f) | uint32_t(rounded == magnitude));
}

// DecodeDenseBody's test alone: whether every value is one, nothing written.
[[gnu::always_inline]] inline bool DenseValidBody(const char* __restrict payload, size_t n) {
  uint32_t all_valid = 1;
  for (size_t i = 0; i < n; ++i) all_valid &= PayloadValueValid(LoadPayloadBits(payload + 4 * i));
  return all_valid != 0;
}

// The same test against another dense payload's values (a view of checked
// bytes, quanta_span.h), in 32-bit lanes: two valid values (integers below
// 2^62, so their truncation is the value itself) decode to the same quanta
// exactly when they are equal as floats (-0 == +0 included; NaN is not
// valid). No conversion to int64: the AVX2 copy has none, and in the
// AVX-512 copy it took four conversions for every 16 values.
[[gnu::always_inline]] inline bool DensePayloadsEqualBody(const char* __restrict payload,
                                                          const char* __restrict expected,
                                                          size_t n) {
  uint32_t all_equal = 1;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = LoadPayloadBits(payload + 4 * i);
    const uint32_t expected_bits = LoadPayloadBits(expected + 4 * i);
    all_equal &= PayloadValueValid(bits) & PayloadValueValid(expected_bits) &
                 uint32_t(std::bit_cast<float>(bits) == std::bit_cast<float>(expected_bits));
  }
  return all_equal != 0;
}

// a + b modulo 2^64 (the replica's arithmetic). The sum left the signed
// int64 range (wrapped) exactly when both addends' signs differ from the
// sum's: bit 63 of WrapBits. Wraps are rare (the grid's range is 2^63
// quanta), so the loops below OR each sum's bits into one word, three
// operations for two vectors, and count only a range where that word's
// bit 63 is set, again from the sums and the addends (a = sum - b modulo
// 2^64): counting every sum as it was made took a shift and two adds more
// for every eight, a third of the dense apply's sum in the L1 cache.
[[gnu::always_inline]] inline uint64_t WrapBits(uint64_t a, uint64_t b, uint64_t sum) {
  return (a ^ sum) & (b ^ sum);
}

// The float copy of `quanta` quanta (QuantaToFloat, fixed_point.h): one
// definition for QuantaToFloatsBody and the sums that write the copy.
[[gnu::always_inline]] inline float FloatOfQuanta(int64_t quanta, double quantum) {
  return static_cast<float>(static_cast<double>(quanta) * quantum);
}

// The delta's value i: a checked dense payload's (4 bytes a value) or an
// int64's.
[[gnu::always_inline]] inline uint64_t DeltaAt(const char* __restrict payload, size_t i) {
  uint32_t valid;
  return static_cast<uint64_t>(PayloadQuanta(LoadPayloadBits(payload + 4 * i), &valid));
}
[[gnu::always_inline]] inline uint64_t DeltaAt(const int64_t* __restrict delta, size_t i) {
  return static_cast<uint64_t>(delta[i]);
}

// The delta from its value i on: a payload's or an int64 array's.
[[gnu::always_inline]] inline const char* DeltaFrom(const char* payload, size_t i) {
  return payload + 4 * i;
}
[[gnu::always_inline]] inline const int64_t* DeltaFrom(const int64_t* delta, size_t i) {
  return delta + i;
}

// The float copy's values before its first 32-byte boundary (at most 7 of
// n): a vector copy's sums stream the copy (AddWrappingBody) in aligned
// 32-byte stores from there.
[[gnu::always_inline]] inline size_t FloatsBefore32ByteBoundary(const float* weights, size_t n) {
  const size_t misaligned = reinterpret_cast<uintptr_t>(weights) & 31;
  const size_t head = misaligned == 0 ? 0 : (32 - misaligned) / sizeof(float);
  return head < n ? head : n;
}

// How many of the sums quanta[i] (already made) wrapped, from the sums and
// the addends (a = sum - b modulo 2^64): the sums' second loop, run only
// where their OR of WrapBits had bit 63 set.
template <typename Delta>
[[gnu::always_inline]] inline uint64_t CountWrapsBody(const int64_t* __restrict quanta,
                                                      const Delta* __restrict delta, size_t n) {
  uint64_t wraps = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t sum = static_cast<uint64_t>(quanta[i]), b = DeltaAt(delta, i);
    wraps += WrapBits(sum - b, b, sum) >> 63;
  }
  return wraps;
}

// The dense apply's sums: quanta[i] += the delta's value i, modulo 2^64,
// and where kFloats the float copy in the same loop, from the sum still in
// its register (a second pass over each block read the sums back and left
// the quanta's and the copy's memory streams one after the other: the
// apply of one core's half of a 669,706-parameter model from memory 197 ->
// 168 us, mean of 40). Returns how many sums wrapped. With the pointers
// __restrict, the loop vectorizes (it did not through the replica's
// lambda: 5.9% of a dense worker's samples, one value at a time). Software
// prefetch 1,024 values ahead was tried (a139dd4) and taken out: one core
// alone applied from memory in 84-129 us instead of 140-160, but a dense
// worker's two threads applying at once are bound by the bandwidth (its
// apply's samples 712-869 before, 852-902 with it), and a block in the L1
// cache took 8% longer.
// The vector copies (AVX-512, AVX2) write the float copy with
// non-temporal stores instead (elementwise.h FloatCopyOut): the same bits;
// this body is their head and tail, and the portable copy.
template <bool kFloats, typename Delta>
[[gnu::always_inline]] inline uint64_t AddWrappingBody(int64_t* __restrict quanta,
                                                       const Delta* __restrict delta, size_t n,
                                                       float* __restrict weights, double quantum) {
  uint64_t any_wrap = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t a = static_cast<uint64_t>(quanta[i]), b = DeltaAt(delta, i);
    const uint64_t sum = a + b;
    quanta[i] = static_cast<int64_t>(sum);
    if constexpr (kFloats) weights[i] = FloatOfQuanta(static_cast<int64_t>(sum), quantum);
    any_wrap |= WrapBits(a, b, sum);
  }
  return (any_wrap >> 63) == 0 ? 0 : CountWrapsBody(quanta, delta, n);
}

// SubtractQuantaBody from the payload, in float: a payload value v is an
// integer below 2^62 (24 significant bits) and the quantum 2^-fb (fb in
// [0, 62]) a float, so v * 2^-fb is exact in double and (float) rounds the
// exact product, as the float multiply does: the same bits as
// (float)((double)v * quantum), 16 values an instruction instead of eight
// and no conversions (the double form took 294 ns for a 16 KB block in the
// L1 cache, more than the encode before it). -0 is 0 quanta: adding +0
// makes it +0 (round to nearest), or a residual of -0 would become +0 here
// and stay -0 from the int64 quanta (and on the device,
// cuda/device_codec.h). The same bits as SubtractQuanta.
[[gnu::always_inline]] inline void SubtractDenseBody(float* __restrict residual,
                                                     const char* __restrict payload, size_t n,
                                                     int fraction_bits) {
  const float quantum = std::bit_cast<float>(static_cast<uint32_t>(127 - fraction_bits) << 23);
  for (size_t i = 0; i < n; ++i) {
    const float v = std::bit_cast<float>(LoadPayloadBits(payload + 4 * i));
    residual[i] -= (v + 0.0f) * quantum;
  }
}

[[gnu::always_inline]] inline void SubtractQuantaBody(float* __restrict residual,
                                                      const int64_t* __restrict quanta, size_t n,
                                                      double quantum) {
  for (size_t i = 0; i < n; ++i) {
    residual[i] -= static_cast<float>(static_cast<double>(quanta[i]) * quantum);
  }
}

[[gnu::always_inline]] inline void QuantaToFloatsBody(const int64_t* __restrict quanta, size_t n,
                                                      double quantum, float* __restrict weights) {
  for (size_t i = 0; i < n; ++i) weights[i] = FloatOfQuanta(quanta[i], quantum);
}

}  // namespace reckon::codec::elementwise_bodies

#endif  // RECKON_CODEC_ELEMENTWISE_BODIES_H_
