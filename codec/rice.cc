#include "codec/rice.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/elementwise.h"
#include "codec/rice_bits.h"
#include "codec/rice_chains.h"
#include "codec/update_words.h"

namespace reckon::codec {
namespace {

// Gap of update i: index_i - index_{i-1} - 1, with index_{-1} = -1. Written
// over explicit neighbours (not a running `prev`) so the loops vectorize.
inline uint32_t GapAt(const uint32_t* w, size_t i) {
  return (w[i] & kIndexMask) - (i == 0 ? 0u : (w[i - 1] & kIndexMask) + 1u);
}

// For each of three k, the sum over updates of ceil((gap >> k) / 2), in one
// pass; see OptimalRiceK. uint32 sums cannot overflow: ceil(x / 2) <=
// (x + 1) / 2, and gaps plus count sum to last index + 1 <= 2^31, so each sum
// is at most 2^30. (REQUIRES: words ascending, as for every encoder call.)
[[gnu::always_inline]] inline std::array<uint64_t, 3> SumHalfQuotients3Body(
    std::span<const uint32_t> words, std::array<uint32_t, 3> k) {
  uint32_t a = 0, b = 0, c = 0;
  const uint32_t* w = words.data();
  const size_t n = words.size();
  if (n > 0) {
    const uint32_t g = GapAt(w, 0);
    a += ((g >> k[0]) + 1) >> 1;
    b += ((g >> k[1]) + 1) >> 1;
    c += ((g >> k[2]) + 1) >> 1;
  }
  for (size_t i = 1; i < n; ++i) {
    const uint32_t g = (w[i] & kIndexMask) - (w[i - 1] & kIndexMask) - 1u;
    a += ((g >> k[0]) + 1) >> 1;
    b += ((g >> k[1]) + 1) >> 1;
    c += ((g >> k[2]) + 1) >> 1;
  }
  return {a, b, c};
}

// The body compiled for any x86-64 and for AVX2, chosen by Avx2Available()
// (elementwise.h: RECKON_CPU_ISA caps it as it does every vector copy).
std::array<uint64_t, 3> SumHalfQuotients3Portable(std::span<const uint32_t> words,
                                                  std::array<uint32_t, 3> k) {
  return SumHalfQuotients3Body(words, k);
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) std::array<uint64_t, 3> SumHalfQuotients3Avx2(
    std::span<const uint32_t> words, std::array<uint32_t, 3> k) {
  return SumHalfQuotients3Body(words, k);
}
#endif

std::array<uint64_t, 3> SumHalfQuotients3(std::span<const uint32_t> words,
                                          std::array<uint32_t, 3> k) {
#if defined(__x86_64__)
  if (Avx2Available()) return SumHalfQuotients3Avx2(words, k);
#endif
  return SumHalfQuotients3Portable(words, k);
}

// The gaps sum to at most 2^31, so a uint32 sum cannot overflow.
uint64_t SumQuotients(std::span<const uint32_t> words, uint32_t k) {
  uint32_t sum = 0;
  const uint32_t* w = words.data();
  if (!words.empty()) sum += GapAt(w, 0) >> k;
  for (size_t i = 1; i < words.size(); ++i) {
    sum += ((w[i] & kIndexMask) - (w[i - 1] & kIndexMask) - 1u) >> k;
  }
  return sum;
}

// Appends bit fields least-significant-bit first into a buffer that has at
// least 8 bytes of slack past the last byte it will complete.
class BitWriter {
 public:
  explicit BitWriter(unsigned char* out) : out_(out) {}

  // REQUIRES: len <= 56, value < 2^len.
  void Put(uint64_t value, unsigned len) {
    pending_ |= value << pending_bits_;
    pending_bits_ += len;
    // Store all 8 bytes each time (branch-free); only complete bytes advance.
    const uint64_t le = ToLittle(pending_);
    std::memcpy(out_, &le, 8);
    out_ += pending_bits_ >> 3;
    pending_ >>= pending_bits_ & ~7u;
    pending_bits_ &= 7;
  }

  // Bytes holding the bits written so far, counted from `start`.
  size_t BytesFrom(const unsigned char* start) const {
    return static_cast<size_t>(out_ - start) + (pending_bits_ != 0 ? 1 : 0);
  }

  void PutZeros(uint64_t n) {
    while (n > 56) {
      Put(0, 56);
      n -= 56;
    }
    Put(0, static_cast<unsigned>(n));
  }

 private:
  static uint64_t ToLittle(uint64_t v) {
    if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
    return v;
  }
  unsigned char* out_;
  uint64_t pending_ = 0;
  unsigned pending_bits_ = 0;  // < 8 between calls
};

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("rice: ", what));
}

// Stage one of encoding, for `n` updates after one whose index is `prev`:
// each update's code (unary stop bit at bit q, then r, then the sign) and its
// length q + k + 2. Codes are only meaningful when that length is <= 56.
// Branch-free and lane-independent, so it vectorizes (AVX2 has the per-lane
// 64-bit shifts it needs, AVX-512 twice the lanes; the portable copy is
// scalar). The first update's neighbour is `prev`: it is done before the
// loop, whose body then has no condition (with `j == 0 ? prev : ...` in it
// GCC gave each vector a masked load and a blend, and this stage was half of
// the encode's time: EncodeRice at density 0.001 went 0.95 -> 0.74 ns an
// update with that alone, 0.64 with the AVX-512 clone too).
[[gnu::always_inline]] inline void ComputeCodesBody(const uint32_t* w, size_t n, uint32_t prev,
                                                    uint32_t k, uint64_t* codes, uint64_t* lens) {
  const uint64_t low_mask = (uint64_t{1} << k) - 1;
  auto one = [&](size_t j, uint32_t before) {
    const uint64_t gap = (w[j] & kIndexMask) - before - 1u;
    const uint64_t q = gap >> k;
    lens[j] = q + k + 2;
    const uint64_t tail = (gap & low_mask) | (uint64_t{w[j] >> 31} << k);
    codes[j] = ((tail << 1) | 1) << (q & 63);
  };
  if (n == 0) return;
  one(0, prev);
  for (size_t j = 1; j < n; ++j) one(j, w[j - 1] & kIndexMask);
}

// The body for any x86-64, AVX2 and AVX-512, chosen as SumHalfQuotients3's.
void ComputeCodesPortable(const uint32_t* w, size_t n, uint32_t prev, uint32_t k, uint64_t* codes,
                          uint64_t* lens) {
  ComputeCodesBody(w, n, prev, k, codes, lens);
}
#if defined(__x86_64__)
__attribute__((target("avx2"))) void ComputeCodesAvx2(const uint32_t* w, size_t n, uint32_t prev,
                                                      uint32_t k, uint64_t* codes, uint64_t* lens) {
  ComputeCodesBody(w, n, prev, k, codes, lens);
}
__attribute__((target("avx512f"))) void ComputeCodesAvx512(const uint32_t* w, size_t n,
                                                           uint32_t prev, uint32_t k,
                                                           uint64_t* codes, uint64_t* lens) {
  ComputeCodesBody(w, n, prev, k, codes, lens);
}
#endif

void ComputeCodes(const uint32_t* w, size_t n, uint32_t prev, uint32_t k, uint64_t* codes,
                  uint64_t* lens) {
#if defined(__x86_64__)
  if (Avx512Available()) return ComputeCodesAvx512(w, n, prev, k, codes, lens);
  if (Avx2Available()) return ComputeCodesAvx2(w, n, prev, k, codes, lens);
#endif
  ComputeCodesPortable(w, n, prev, k, codes, lens);
}

}  // namespace

uint64_t RiceEncodedBits(std::span<const uint32_t> words, uint32_t k) {
  return SumQuotients(words, k) + uint64_t{words.size()} * (k + 2);
}

uint32_t OptimalRiceK(std::span<const uint32_t> words) {
  if (words.empty()) return 0;
  const uint64_t count = words.size();
  // slope(k) = bits(k+1) - bits(k) = count - H(k), H = sum of half quotients.
  // "slope(k) >= 0", i.e. H(k) <= count, is false then true as k grows; the
  // optimum is the first k where it holds (30 if none). Search [lo, hi] with
  // three probes per pass, the first pass around log2 of the mean gap, which
  // usually settles it.
  uint32_t lo = 0, hi = kMaxRiceK;
  const uint64_t mean_gap = (uint64_t{UpdateIndex(words.back())} + 1) / count;
  const uint32_t guess =
      std::min<uint32_t>(mean_gap > 1 ? std::bit_width(mean_gap) - 1 : 0, kMaxRiceK - 1);
  std::array<uint32_t, 3> probes = {guess > 0 ? guess - 1 : 0, guess, guess + 1};
  while (lo < hi) {
    const std::array<uint64_t, 3> h = SumHalfQuotients3(words, probes);
    for (int j = 0; j < 3; ++j) {
      if (probes[j] < lo || probes[j] >= hi) continue;
      if (h[j] <= count) {
        hi = probes[j];
      } else {
        lo = std::max(lo, probes[j] + 1);
      }
    }
    const uint32_t width = hi - lo;
    for (uint32_t j = 0; j < 3; ++j) probes[j] = lo + width * (j + 1) / 4;
  }
  return lo;
}

void EncodeRice(std::span<const uint32_t> words, uint32_t k, std::string* payload) {
  const uint32_t* w = words.data();
  const size_t n = words.size();
  // Size the buffer without a pass over the data: the quotients sum to at
  // most (sum of gaps) >> k, and the gaps sum to last index + 1 - count.
  const uint64_t gap_sum = n == 0 ? 0 : uint64_t{w[n - 1] & kIndexMask} + 1 - n;
  const uint64_t max_bytes = (uint64_t{n} * (k + 2) + (gap_sum >> k) + 7) / 8;
  payload->assign(max_bytes + 8, '\0');  // 8 bytes of slack for BitWriter
  auto* start = reinterpret_cast<unsigned char*>(payload->data());
  BitWriter writer(start);
  const uint64_t low_mask = (uint64_t{1} << k) - 1;
  const unsigned fixed_bits = k + 2;
  // One update's code as a bit field: unary stop bit at bit q, then r, then
  // the sign. Only meaningful when q + k + 2 <= 56 (the callers check).
  auto code = [&](uint64_t gap, uint32_t word, uint64_t& len) {
    const uint64_t q = gap >> k;
    len = q + fixed_bits;
    const uint64_t tail = (gap & low_mask) | (uint64_t{word >> 31} << k);  // r, then sign
    return (uint64_t{1} | (tail << 1)) << (q & 63);
  };
  auto put_one = [&](size_t i) {
    const uint64_t gap = GapAt(w, i);
    uint64_t len;
    const uint64_t c = code(gap, w[i], len);
    if (len <= 56) [[likely]] {
      writer.Put(c, static_cast<unsigned>(len));
    } else {
      writer.PutZeros(gap >> k);
      writer.Put(uint64_t{1} | (((gap & low_mask) | (uint64_t{w[i] >> 31} << k)) << 1), fixed_bits);
    }
  };
  if (n > 0) put_one(0);
  // Fast path: join a group of codes into one field and write it at once, so
  // the writer's serial chain runs once per group, not once per update. The
  // group size is what usually fits in 56 bits at the optimal k (codes
  // average about k + 3 bits); a group that does not fit goes one by one.
  // The group size is a compile-time constant so the inner loop unrolls.
  // Codes are computed a chunk at a time (stage one, vectorized), then joined
  // into groups and written (stage two).
  constexpr size_t kChunk = 512;
  uint64_t codes[kChunk];
  uint64_t lens[kChunk];
  size_t i = 1;
  auto run_groups = [&]<size_t kGroup>() {
    constexpr size_t kChunkGroups = kChunk / kGroup;
    while (i + kGroup <= n) {
      const size_t groups = std::min<size_t>(kChunkGroups, (n - i) / kGroup);
      ComputeCodes(w + i, groups * kGroup, w[i - 1] & kIndexMask, k, codes, lens);
      for (size_t gi = 0; gi < groups; ++gi, i += kGroup) {
        const uint64_t* c = codes + gi * kGroup;
        const uint64_t* l = lens + gi * kGroup;
        uint64_t field = 0, field_len = 0;
        for (size_t g = 0; g < kGroup; ++g) {
          field |= c[g] << (field_len & 63);
          field_len += l[g];
        }
        if (field_len <= 56) [[likely]] {
          writer.Put(field, static_cast<unsigned>(field_len));
        } else {
          for (size_t g = 0; g < kGroup; ++g) put_one(i + g);
        }
      }
    }
  };
  DispatchGroupSize(GroupSize(k), run_groups);
  for (; i < n; ++i) put_one(i);
  payload->resize(writer.BytesFrom(start));
}

namespace {

// Decodes one update at bit `pos`, one careful step at a time; used at the
// ends of the stream, for long unary runs, and to redo a group that failed
// its check (so that every error is reported by this path, with its reason).
absl::Status DecodeOne(const BitReader& reader, uint64_t total_bits, uint32_t k,
                       uint64_t param_count, uint64_t i, uint64_t* pos, uint64_t* next,
                       uint32_t* out) {
  uint64_t v = reader.Peek(*pos);
  uint64_t q = 0;
  while (v == 0) {
    q += kPeekBits;
    *pos += kPeekBits;
    // Bounds time by the payload size, and q << k below by 2^61.
    if (*pos >= total_bits || q >= param_count) {
      return Corrupt(absl::StrCat("update ", i, ": unary quotient runs past ",
                                  *pos >= total_bits ? "the end of the stream" : "param_count"));
    }
    v = reader.Peek(*pos);
  }
  const unsigned zeros = std::countr_zero(v);
  q += zeros;
  *pos += zeros + 1;
  if (q >= param_count) {
    return Corrupt(absl::StrCat("update ", i, ": quotient ", q, " exceeds param_count"));
  }
  const uint64_t tail = reader.Peek(*pos);  // r, then the sign
  *pos += k + 1;
  if (*pos > total_bits) {
    return Corrupt(absl::StrCat("stream ends inside update ", i));
  }
  const uint64_t index = *next + ((q << k) | (tail & ((uint64_t{1} << k) - 1)));
  if (index >= param_count) {
    return Corrupt(
        absl::StrCat("update ", i, " has index ", index, " >= param_count ", param_count));
  }
  *out = static_cast<uint32_t>(index) | static_cast<uint32_t>(((tail >> k) & 1) << 31);
  *next = index + 1;
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeRice(std::string_view payload, uint64_t count, uint32_t k, uint64_t param_count,
                        std::vector<uint32_t>* words, const RiceDecodeTuning& tuning) {
  words->clear();
  if (k > kMaxRiceK) return Corrupt(absl::StrCat("k = ", k, " exceeds 30"));
  if (param_count > kMaxParamCount) {
    return Corrupt(absl::StrCat("param_count ", param_count, " exceeds 2^31"));
  }
  if (count > param_count) {
    return Corrupt(absl::StrCat("count ", count, " exceeds param_count ", param_count));
  }
  const uint64_t total_bits = uint64_t{payload.size()} * 8;
  // Each update takes at least k + 2 bits: this bounds the allocation below by
  // the payload size, whatever `count` claims.
  if (count * (k + 2) > total_bits) {
    return Corrupt(absl::StrCat("stream ends before update ", total_bits / (k + 2), " of ", count,
                                " (", payload.size(), " bytes for k = ", k, ")"));
  }
  words->resize(count);
  uint32_t* out = words->data();
  const BitReader reader(reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
  const uint64_t low_mask = (uint64_t{1} << k) - 1;
  const unsigned fixed_bits = k + 2;  // stop bit, r, sign
  // Fast path: decode a group of updates from one 57-bit window with no
  // reload and no per-update branch, then check once that they all fitted in
  // the window and the stream, and that the last (largest) index is in range.
  // A failed check redoes the group carefully, which also reports any error.
  uint64_t pos = 0;
  uint64_t next = 0;  // previous index + 1
  uint64_t i =
      DecodeRiceRounds(reader, total_bits, count, k, param_count, tuning, &pos, &next, out);
  absl::Status status;
  auto run_groups = [&]<size_t kGroup>() {
    while (i + kGroup <= count) {
      uint64_t v = reader.Peek(pos);
      uint64_t consumed = 0;
      uint64_t group_next = next;
      for (size_t g = 0; g < kGroup; ++g) {
        // When v ran out q is 64: the shift by q & 63 leaves v's 0, and the
        // sum exceeds the window, so the check below fails.
        const uint64_t q = std::countr_zero(v);
        const uint64_t at_stop = v >> (q & 63);
        const uint64_t tail = at_stop >> 1;
        const uint64_t index = group_next + ((q << k) | (tail & low_mask));
        out[i + g] = static_cast<uint32_t>(index) | static_cast<uint32_t>(((tail >> k) & 1) << 31);
        group_next = index + 1;
        consumed += q + fixed_bits;
        v = at_stop >> fixed_bits;
      }
      if (consumed <= kPeekBits && pos + consumed <= total_bits && group_next <= param_count)
          [[likely]] {
        pos += consumed;
        next = group_next;
        i += kGroup;
        continue;
      }
      for (const uint64_t end = i + kGroup; i < end; ++i) {
        status = DecodeOne(reader, total_bits, k, param_count, i, &pos, &next, &out[i]);
        if (!status.ok()) return;
      }
    }
  };
  DispatchGroupSize(GroupSize(k), run_groups);
  if (!status.ok()) {
    words->clear();
    return status;
  }
  for (; i < count; ++i) {
    if (absl::Status s = DecodeOne(reader, total_bits, k, param_count, i, &pos, &next, &out[i]);
        !s.ok()) {
      words->clear();
      return s;
    }
  }
  const uint64_t used_bytes = (pos + 7) / 8;
  if (used_bytes != payload.size()) {
    words->clear();
    return Corrupt(absl::StrCat(payload.size() - used_bytes, " bytes after the padding (", count,
                                " updates end at byte ", used_bytes, ")"));
  }
  if (pos % 8 != 0 && (reader.Peek(pos) & 0xFF) != 0) {
    words->clear();
    return Corrupt("non-zero padding bits after the last update");
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec
