#include "codec/rice_chains.h"

#include <algorithm>
#include <bit>
#include <memory>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codec/elementwise.h"
#include "codec/update_words.h"

namespace reckon::codec {
namespace {

// The two-chain rounds are compiled for BMI1 and BMI2 (tzcnt, and shifts by
// a register in one instruction: the chained work is shifts) and run where
// the CPU has them.
#if defined(__x86_64__)
#define RECKON_BMI2 __attribute__((target("bmi,bmi2")))
bool TwoChainsAvailable() {
  static const bool available = __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
  return available;
}
#else
#define RECKON_BMI2
bool TwoChainsAvailable() { return false; }
#endif

// One walk of a two-chain round (rice.h): each code's quotient and the 32
// bits from its stop bit on (bit 0 the stop bit, then r, then the sign).
// Code j's two are codes[2j] and codes[2j + 1] (one pointer a chain: the
// two chains' loop is short of registers).
struct Chain {
  uint64_t pos = 0;  // the bit after its last code
  uint32_t* codes = nullptr;
  uint32_t q(size_t j) const { return codes[2 * j]; }
  size_t n = 0;
  size_t cap = 0;
  bool ended = false;  // no complete code at pos, or one whose quotient is too large
};

// One code of `c` at its pos, any length (DecodeOne's steps, refusing
// nothing): false when the stream holds no complete code there or its
// quotient reaches `q_limit` (param_count, so that it fits 32 bits).
RECKON_BMI2 bool StepOne(const BitReader& reader, uint64_t total_bits, uint32_t k, uint64_t q_limit,
                         Chain* c) {
  uint64_t pos = c->pos;
  uint64_t v = reader.Peek(pos);
  uint64_t q = 0;
  while (v == 0) {
    q += kPeekBits;
    pos += kPeekBits;
    if (pos >= total_bits || q >= q_limit) return false;
    v = reader.Peek(pos);
  }
  const unsigned zeros = std::countr_zero(v);
  q += zeros;
  pos += zeros;  // the stop bit
  if (q >= q_limit || pos + k + 2 > total_bits) return false;
  c->codes[2 * c->n] = static_cast<uint32_t>(q);
  c->codes[2 * c->n + 1] = static_cast<uint32_t>(reader.Peek(pos));
  ++c->n;
  c->pos = pos + k + 2;
  return true;
}

// kGroup codes from `v` (the 64 bits at a chain's pos) into `codes`, with
// no branch: returns the bits they take (over kPeekBits, or past the
// stream's end, and they are not to be kept).
template <size_t kGroup>
RECKON_BMI2 inline uint64_t GroupFromWindow(uint64_t v, uint64_t fixed_bits, uint32_t* codes) {
  uint64_t consumed = 0;
  for (size_t g = 0; g < kGroup; ++g) {
    // No sentinel bit (an OR on the chain, whose serial work a code is its
    // count of zeros and two shifts): when v ran out, zeros is 64, the shift
    // by zeros & 63 (what shrx does anyway) leaves v's 0, and the sum
    // exceeds the window.
    const uint64_t zeros = std::countr_zero(v);
    const uint64_t at_stop = v >> (zeros & 63);
    codes[2 * g] = static_cast<uint32_t>(zeros);
    codes[2 * g + 1] = static_cast<uint32_t>(at_stop);
    consumed += zeros + fixed_bits;
    v = at_stop >> fixed_bits;
  }
  return consumed;
}

// kGroup codes of `c`: from one window when they fit it and the stream (the
// one-chain fast path's test, without the index's, which IndicesOf makes),
// else one at a time. REQUIRES: c->n + kGroup <= c->cap, !c->ended.
template <size_t kGroup>
RECKON_BMI2 inline void StepCodes(const BitReader& reader, uint64_t total_bits, uint32_t k,
                                  uint64_t q_limit, Chain* c) {
  const uint64_t consumed =
      GroupFromWindow<kGroup>(reader.Peek(c->pos), k + 2, c->codes + 2 * c->n);
  if (consumed <= kPeekBits && c->pos + consumed <= total_bits) [[likely]] {
    c->pos += consumed;
    c->n += kGroup;
    return;
  }
  for (size_t g = 0; g < kGroup && !c->ended; ++g) {
    c->ended = !StepOne(reader, total_bits, k, q_limit, c);
  }
}

// The words of n codes after an update whose index + 1 is *next, into out;
// false if an index reaches param_count (*next is then unspecified).
bool IndicesPortable(const uint32_t* codes, size_t n, uint32_t k, uint64_t param_count,
                     uint64_t* next, uint32_t* out) {
  const uint32_t low_mask = (uint32_t{1} << k) - 1;
  uint64_t following = *next;
  bool in_range = true;
  for (size_t j = 0; j < n; ++j) {
    const uint32_t q = codes[2 * j], at = codes[2 * j + 1];
    const uint64_t index = following + ((uint64_t{q} << k) | ((at >> 1) & low_mask));
    in_range &= index < param_count;
    out[j] = static_cast<uint32_t>(index) | (((at >> (k + 1)) & 1u) << 31);
    following = index + 1;
  }
  *next = following;
  return in_range;
}

#if defined(__x86_64__)
// IndicesPortable sixteen codes at a time: the gaps + 1 summed in 32-bit
// lanes (a prefix sum in four shifted adds), onto the last block's index.
// No lane wraps: a block's quotients are below 2^(26 - k) (else it goes the
// portable way), so its 16 gaps + 1 sum below 2^31, and every index before
// it is below param_count <= 2^31. (GCC 12 warns that its own headers' _mm512
// intrinsics use a value uninitialized: a false positive, as in elementwise.cc.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) inline uint64_t LastLanePlusOne(__m512i broadcast) {
  return uint64_t{static_cast<uint32_t>(_mm_cvtsi128_si32(_mm512_castsi512_si128(broadcast)))} + 1;
}

__attribute__((target("avx512f"))) bool IndicesAvx512(const uint32_t* codes, size_t n, uint32_t k,
                                                      uint64_t param_count, uint64_t* next,
                                                      uint32_t* out) {
  if (k > 26) return IndicesPortable(codes, n, k, param_count, next, out);
  const __m512i evens =
      _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odds = _mm512_add_epi32(evens, _mm512_set1_epi32(1));
  const __m512i low_mask = _mm512_set1_epi32(static_cast<int>((uint32_t{1} << k) - 1));
  const __m512i q_limit = _mm512_set1_epi32(static_cast<int>(uint32_t{1} << (26 - k)));
  const __m512i limit = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(param_count - 1)));
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(kSignBit));
  const __m512i one = _mm512_set1_epi32(1);
  const __m512i zero = _mm512_setzero_si512();
  const __m512i last_lane = _mm512_set1_epi32(15);
  const __m128i shift_k = _mm_cvtsi32_si128(static_cast<int>(k));
  const __m128i sign_to_top = _mm_cvtsi32_si128(static_cast<int>(30 - k));  // bit k + 1 -> 31
  // The last index so far in every lane (mod 2^32: all ones before index 0).
  __m512i last = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(*next - 1)));
  __mmask16 out_of_range = 0;
  size_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512i lo = _mm512_loadu_si512(codes + 2 * j);
    const __m512i hi = _mm512_loadu_si512(codes + 2 * j + 16);
    const __m512i quotients = _mm512_permutex2var_epi32(lo, evens, hi);
    const __m512i tails = _mm512_permutex2var_epi32(lo, odds, hi);
    if (_mm512_cmpge_epu32_mask(quotients, q_limit) != 0) [[unlikely]] {
      uint64_t following = j == 0 ? *next : LastLanePlusOne(last);
      if (!IndicesPortable(codes + 2 * j, 16, k, param_count, &following, out + j)) return false;
      last = _mm512_set1_epi32(static_cast<int>(static_cast<uint32_t>(following - 1)));
      continue;
    }
    const __m512i r = _mm512_and_si512(_mm512_srli_epi32(tails, 1), low_mask);
    __m512i sum = _mm512_add_epi32(_mm512_or_si512(_mm512_sll_epi32(quotients, shift_k), r), one);
    sum = _mm512_add_epi32(sum, _mm512_alignr_epi32(sum, zero, 15));
    sum = _mm512_add_epi32(sum, _mm512_alignr_epi32(sum, zero, 14));
    sum = _mm512_add_epi32(sum, _mm512_alignr_epi32(sum, zero, 12));
    sum = _mm512_add_epi32(sum, _mm512_alignr_epi32(sum, zero, 8));
    const __m512i index = _mm512_add_epi32(sum, last);
    out_of_range |= _mm512_cmpgt_epu32_mask(index, limit);
    const __m512i sign = _mm512_and_si512(_mm512_sll_epi32(tails, sign_to_top), sign_bit);
    _mm512_storeu_si512(out + j, _mm512_or_si512(index, sign));
    last = _mm512_permutexvar_epi32(last_lane, index);
  }
  if (out_of_range != 0) return false;
  uint64_t following = j == 0 ? *next : LastLanePlusOne(last);
  if (!IndicesPortable(codes + 2 * j, n - j, k, param_count, &following, out + j)) return false;
  *next = following;
  return true;
}
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

__attribute__((target("avx2"))) inline uint64_t LastLanePlusOne(__m256i broadcast) {
  return uint64_t{static_cast<uint32_t>(_mm256_cvtsi256_si32(broadcast))} + 1;
}

// IndicesAvx512 eight codes at a time, for a CPU with AVX2 and not AVX-512
// (AMD's Zen 3 among them): the codes' pairs split into quotients and tails
// by two lane permutes, the prefix sum in each 16-byte half by two byte
// shifts and then the low half's total added to the high half, unsigned
// compares by max_epu32. The same bound on a block's sum, so no lane wraps.
__attribute__((target("avx2"))) bool IndicesAvx2(const uint32_t* codes, size_t n, uint32_t k,
                                                 uint64_t param_count, uint64_t* next,
                                                 uint32_t* out) {
  if (k > 26) return IndicesPortable(codes, n, k, param_count, next, out);
  const __m256i pairs_apart = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i low_mask = _mm256_set1_epi32(static_cast<int>((uint32_t{1} << k) - 1));
  const __m256i q_limit = _mm256_set1_epi32(static_cast<int>(uint32_t{1} << (26 - k)));
  const __m256i limit = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(param_count - 1)));
  const __m256i sign_bit = _mm256_set1_epi32(static_cast<int>(kSignBit));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i lane3 = _mm256_set1_epi32(3), lane7 = _mm256_set1_epi32(7);
  const __m128i shift_k = _mm_cvtsi32_si128(static_cast<int>(k));
  const __m128i sign_to_top = _mm_cvtsi32_si128(static_cast<int>(30 - k));  // bit k + 1 -> 31
  // The last index so far in every lane (mod 2^32: all ones before index 0).
  __m256i last = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(*next - 1)));
  __m256i in_range = _mm256_set1_epi32(-1);
  size_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256i lo = _mm256_permutevar8x32_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * j)), pairs_apart);
    const __m256i hi = _mm256_permutevar8x32_epi32(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes + 2 * j + 8)), pairs_apart);
    const __m256i quotients = _mm256_permute2x128_si256(lo, hi, 0x20);
    const __m256i tails = _mm256_permute2x128_si256(lo, hi, 0x31);
    const __m256i too_long = _mm256_cmpeq_epi32(_mm256_max_epu32(quotients, q_limit), quotients);
    if (!_mm256_testz_si256(too_long, too_long)) [[unlikely]] {
      uint64_t following = j == 0 ? *next : LastLanePlusOne(last);
      if (!IndicesPortable(codes + 2 * j, 8, k, param_count, &following, out + j)) return false;
      last = _mm256_set1_epi32(static_cast<int>(static_cast<uint32_t>(following - 1)));
      continue;
    }
    const __m256i r = _mm256_and_si256(_mm256_srli_epi32(tails, 1), low_mask);
    __m256i sum = _mm256_add_epi32(_mm256_or_si256(_mm256_sll_epi32(quotients, shift_k), r), one);
    sum = _mm256_add_epi32(sum, _mm256_slli_si256(sum, 4));
    sum = _mm256_add_epi32(sum, _mm256_slli_si256(sum, 8));
    sum = _mm256_add_epi32(sum, _mm256_blend_epi32(_mm256_setzero_si256(),
                                                   _mm256_permutevar8x32_epi32(sum, lane3), 0xf0));
    const __m256i index = _mm256_add_epi32(sum, last);
    in_range =
        _mm256_and_si256(in_range, _mm256_cmpeq_epi32(_mm256_max_epu32(index, limit), limit));
    const __m256i sign = _mm256_and_si256(_mm256_sll_epi32(tails, sign_to_top), sign_bit);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + j), _mm256_or_si256(index, sign));
    last = _mm256_permutevar8x32_epi32(index, lane7);
  }
  if (_mm256_movemask_epi8(in_range) != -1) return false;
  uint64_t following = j == 0 ? *next : LastLanePlusOne(last);
  if (!IndicesPortable(codes + 2 * j, n - j, k, param_count, &following, out + j)) return false;
  *next = following;
  return true;
}
#endif

// The indices' sums in the copy `isa` asks for (Isa::kPortable: the
// portable one).
bool IndicesOf(Isa isa, const uint32_t* codes, size_t n, uint32_t k, uint64_t param_count,
               uint64_t* next, uint32_t* out) {
#if defined(__x86_64__)
  if (UseAvx512(isa)) return IndicesAvx512(codes, n, k, param_count, next, out);
  if (UseAvx2(isa)) return IndicesAvx2(codes, n, k, param_count, next, out);
#endif
  return IndicesPortable(codes, n, k, param_count, next, out);
}

// Where one two-chain round starts and writes.
struct Round {
  uint64_t pos;   // a code's start (the last round's end)
  uint64_t next;  // the last index + 1
  uint32_t* out;  // room for `room` words
  uint64_t room;
};

// The round's chained work: both chains from their starts, a group of each
// at a time, until the first reaches `start1` (or one ends, or the second's
// room is full).
template <size_t kGroup>
RECKON_BMI2 void WalkSideBySide(const BitReader& reader, uint64_t total_bits, uint32_t k,
                                uint64_t param_count, uint64_t start1, Chain* c0, Chain* c1) {
  const uint64_t fixed_bits = k + 2;
  // The chained work, two chains side by side for the core to overlap: a
  // group of each from one window each, in locals (no chain state in memory).
  // A group that does not fit (a long code, the stream's end) is redone one
  // code at a time (StepCodes) and the pair goes on.
  for (;;) {
    uint64_t pos0 = c0->pos, pos1 = c1->pos;
    uint32_t* codes0 = c0->codes + 2 * c0->n;
    uint32_t* codes1 = c1->codes + 2 * c1->n;
    // The last group that fits each chain's codes: the second's is the
    // smaller, and the first decodes no more than it here.
    const uint32_t* const last1 = c1->codes + 2 * (c1->cap - kGroup);
    bool fitted = true;
    while (pos0 < start1 && codes1 <= last1) {
      const uint64_t used0 = GroupFromWindow<kGroup>(reader.Peek(pos0), fixed_bits, codes0);
      const uint64_t used1 = GroupFromWindow<kGroup>(reader.Peek(pos1), fixed_bits, codes1);
      if (used0 > kPeekBits || used1 > kPeekBits || pos0 + used0 > total_bits ||
          pos1 + used1 > total_bits) [[unlikely]] {
        fitted = false;
        break;
      }
      pos0 += used0;
      pos1 += used1;
      codes0 += 2 * kGroup;
      codes1 += 2 * kGroup;
    }
    c0->pos = pos0;
    c1->pos = pos1;
    c0->n = static_cast<size_t>(codes0 - c0->codes) / 2;
    c1->n = static_cast<size_t>(codes1 - c1->codes) / 2;
    if (fitted) break;
    StepCodes<kGroup>(reader, total_bits, k, param_count, c0);
    StepCodes<kGroup>(reader, total_bits, k, param_count, c1);
    if (c0->ended || c1->ended) break;
  }
  // The second chain full or ended: the first walks on alone to its start.
  while (c0->pos < start1 && !c0->ended && c0->n + kGroup <= c0->cap) {
    StepCodes<kGroup>(reader, total_bits, k, param_count, c0);
  }
}

// Where the first chain meets the second: walks the first on, code by code,
// from its first stop bit at or past `start1`, each against the second's in
// order. Returns false if they do not meet (the first ended, filled its room
// or passed the second's last code); else the first's code `*j0` and the
// second's `*j1` share their stop bit.
RECKON_BMI2 bool Meet(const BitReader& reader, uint64_t total_bits, uint32_t k,
                      uint64_t param_count, uint64_t start1, Chain* c0, const Chain& c1, size_t* j0,
                      size_t* j1_out) {
  const uint64_t fixed_bits = k + 2;
  // stop(j - 1) = stop(j) - q[j] - fixed_bits.
  size_t j = c0->n - 1;
  uint64_t stop = c0->pos - fixed_bits;
  while (j > 0 && stop - c0->q(j) - fixed_bits >= start1) {
    stop -= c0->q(j) + fixed_bits;
    --j;
  }
  if (stop < start1) ++j;  // none of its codes reached start1: decode on
  size_t j1 = 0;
  uint64_t stop1 = start1 + c1.q(0);
  for (;;) {
    if (j == c0->n) {
      if (c0->ended || c0->n == c0->cap || !StepOne(reader, total_bits, k, param_count, c0)) {
        return false;
      }
      stop = c0->pos - fixed_bits;
    }
    while (j1 + 1 < c1.n && stop1 < stop) {
      ++j1;
      stop1 += fixed_bits + c1.q(j1);
    }
    if (stop1 == stop) break;        // met: from here the second chain's codes are the true ones
    if (stop1 < stop) return false;  // past all of the second chain's codes
    ++j;
    if (j < c0->n) stop += fixed_bits + c0->q(j);
  }
  *j0 = j;
  *j1_out = j1;
  return true;
}

// One round (rice.h): the first chain from r.pos, the second from
// `round_bits` further on, a group at a time each until the first reaches
// the second's start; then the first code by code until one of its stop bits
// is one of the second's. Returns the codes decoded into r.out and advances
// r.pos and r.next past them; 0 when the round is to be decoded one chain at
// a time (a chain ended, they never met, more codes than `room`, or an index
// reached param_count): nothing is then to be kept from r.out.
template <size_t kGroup>
RECKON_BMI2 uint64_t TwoChainRound(const BitReader& reader, uint64_t total_bits, uint32_t k,
                                   uint64_t param_count, uint64_t round_bits, Isa indices, Round* r,
                                   Chain* c0, Chain* c1) {
  const uint64_t start1 = r->pos + round_bits;
  c0->pos = r->pos;
  c1->pos = start1;
  c0->n = c1->n = 0;
  c0->ended = c1->ended = false;
  WalkSideBySide<kGroup>(reader, total_bits, k, param_count, start1, c0, c1);
  if (c0->n == 0 || c1->n == 0) return 0;
  size_t j = 0, j1 = 0;
  if (!Meet(reader, total_bits, k, param_count, start1, c0, *c1, &j, &j1)) return 0;
  const uint64_t first = j + 1, second = c1->n - (j1 + 1);
  if (first + second > r->room) return 0;
  uint64_t next = r->next;
  if (!IndicesOf(indices, c0->codes, first, k, param_count, &next, r->out) ||
      !IndicesOf(indices, c1->codes + 2 * (j1 + 1), second, k, param_count, &next,
                 r->out + first)) {
    return 0;
  }
  r->pos = c1->pos;
  r->next = next;
  r->out += first + second;
  r->room -= first + second;
  return first + second;
}

}  // namespace

uint64_t DecodeRiceRounds(const BitReader& reader, uint64_t total_bits, uint64_t count, uint32_t k,
                          uint64_t param_count, const RiceDecodeTuning& tuning, uint64_t* pos,
                          uint64_t* next, uint32_t* out) {
  // Rounds while the stream holds three more of them (a code is at least
  // k + 2 bits, so a round's first chain decodes at most its round's codes
  // before the second's start) and the message that many codes more. The
  // last rounds shrink with what is left (a third of it), down to 64 codes,
  // so that the one chain decodes only the last few dozen (with rounds of
  // the full size to the end it decoded up to three rounds: 7% of a Strom
  // message).
  const uint64_t round_codes = tuning.round_codes;
  const uint64_t smallest_round = std::min<uint64_t>(round_codes, 64);
  // Without AVX-512 or AVX2 the indices' portable sums cost more than the
  // second chain saves (0.80-0.87x the one chain): rounds then only when a
  // test asks for them (Isa::kPortable).
  const bool rounds =
      round_codes > 0 && TwoChainsAvailable() &&
      (UseAvx512(tuning.indices) || UseAvx2(tuning.indices) || tuning.indices == Isa::kPortable);
  if (!rounds || count < 3 * smallest_round || k > kMaxRiceK) return 0;
  // The largest round this message has (a small message's scratch is small).
  const uint64_t largest_round = std::min(round_codes, count / 3);
  uint64_t decoded = 0;
  auto run = [&]<size_t kGroup>() {
    Chain c0, c1;
    c0.cap = 2 * largest_round + 2 * kGroup;  // its region, then the second's
    c1.cap = largest_round + kGroup;
    const std::unique_ptr<uint32_t[]> scratch(new uint32_t[2 * (c0.cap + c1.cap)]);
    c0.codes = scratch.get();
    c1.codes = c0.codes + 2 * c0.cap;
    Round round{*pos, *next, out, count};
    for (;;) {
      const uint64_t this_round = std::min(largest_round, (count - decoded) / 3);
      const uint64_t round_bits = this_round * (k + 2);
      if (this_round < smallest_round || round.pos + 3 * round_bits > total_bits) break;
      const uint64_t codes = TwoChainRound<kGroup>(reader, total_bits, k, param_count, round_bits,
                                                   tuning.indices, &round, &c0, &c1);
      if (codes == 0) break;  // this round and the rest one chain at a time
      decoded += codes;
    }
    *pos = round.pos;
    *next = round.next;
  };
  DispatchGroupSize(GroupSize(k), run);
  return decoded;
}

}  // namespace reckon::codec
