#include "codec/crc32c.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "codec/elementwise.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace reckon::codec {
namespace {

constexpr uint32_t kPolynomial = 0x82F63B78u;  // reflected Castagnoli

using Table = std::array<std::array<uint32_t, 256>, 8>;

constexpr Table MakeTables() {
  Table t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int bit = 0; bit < 8; ++bit) c = (c >> 1) ^ ((c & 1u) ? kPolynomial : 0u);
    t[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; ++i) {
    for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  }
  return t;
}

constexpr Table kTables = MakeTables();

// Polynomials over GF(2) modulo the CRC's, in the reflected order (the
// highest bit is x^0): a * b mod P.
constexpr uint32_t MultiplyModP(uint32_t a, uint32_t b) {
  uint32_t product = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) product ^= b;
    b = (b & 1u) ? (b >> 1) ^ kPolynomial : b >> 1;
  }
  return product;
}

// x^(2^k) mod P for every k a bit of 8 * (a uint64 size) can need: squaring
// from x^1.
constexpr std::array<uint32_t, 67> PowersOfXSquared() {
  std::array<uint32_t, 67> table{};
  uint32_t p = 1u << 30;  // x^1
  for (uint32_t& power : table) {
    power = p;
    p = MultiplyModP(p, p);
  }
  return table;
}

constexpr std::array<uint32_t, 67> kPowersOfXSquared = PowersOfXSquared();

// x^n mod P, for any n (square and multiply).
constexpr uint32_t XPowerModP(uint64_t n) {
  uint32_t result = 1u << 31;  // x^0
  for (int k = 0; n != 0; n >>= 1, ++k) {
    if (n & 1u) result = MultiplyModP(result, kPowersOfXSquared[k]);
  }
  return result;
}

uint64_t LoadLittle64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
  return v;
}

}  // namespace

uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  while (size >= 8) {
    const uint64_t v = LoadLittle64(p) ^ c;
    c = kTables[7][v & 0xFF] ^ kTables[6][(v >> 8) & 0xFF] ^ kTables[5][(v >> 16) & 0xFF] ^
        kTables[4][(v >> 24) & 0xFF] ^ kTables[3][(v >> 32) & 0xFF] ^ kTables[2][(v >> 40) & 0xFF] ^
        kTables[1][(v >> 48) & 0xFF] ^ kTables[0][v >> 56];
    p += 8;
    size -= 8;
  }
  while (size-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__)
namespace {

// One chain of crc32 instructions over `size` bytes from state `c` (no
// inversion at either end): the raw update.
__attribute__((target("sse4.2"))) uint64_t HardwareChain(uint64_t c, const unsigned char* p,
                                                         size_t size) {
  while (size >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = _mm_crc32_u64(c, v);
    p += 8;
    size -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (size-- > 0) c32 = _mm_crc32_u8(c32, *p++);
  return c32;
}

// The raw state after appending kCrc32cStreamBytes zero bytes, as a linear
// map of the state before (a CRC's update is linear over GF(2)): four
// tables, one per byte of the state, each entry the XOR of the basis
// vectors' images its bits select.
struct ZerosOperator {
  std::array<std::array<uint32_t, 256>, 4> table{};
  ZerosOperator() {
    std::array<unsigned char, kCrc32cStreamBytes> zeros{};
    std::array<uint32_t, 32> basis{};
    for (int bit = 0; bit < 32; ++bit) {
      basis[bit] =
          static_cast<uint32_t>(HardwareChain(uint64_t{1} << bit, zeros.data(), zeros.size()));
    }
    for (int k = 0; k < 4; ++k) {
      for (uint32_t b = 0; b < 256; ++b) {
        uint32_t image = 0;
        for (int j = 0; j < 8; ++j) {
          if (b & (1u << j)) image ^= basis[8 * k + j];
        }
        table[k][b] = image;
      }
    }
  }
  uint32_t Apply(uint32_t s) const {
    return table[0][s & 0xFF] ^ table[1][(s >> 8) & 0xFF] ^ table[2][(s >> 16) & 0xFF] ^
           table[3][s >> 24];
  }
};

}  // namespace

__attribute__((target("sse4.2"))) uint32_t Crc32cHardware(const void* data, size_t size,
                                                          uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t c = ~crc;
  if (size >= 3 * kCrc32cStreamBytes) {
    static const ZerosOperator shift;
    // Rounds of three streams: the first continues the running state, the
    // others start from zero; crc(A B C) = shift(shift(a) ^ b) ^ c.
    while (size >= 3 * kCrc32cStreamBytes) {
      uint64_t a = c, b = 0, d = 0;
      const unsigned char* pb = p + kCrc32cStreamBytes;
      const unsigned char* pd = p + 2 * kCrc32cStreamBytes;
      for (size_t i = 0; i < kCrc32cStreamBytes; i += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + i, 8);
        std::memcpy(&vb, pb + i, 8);
        std::memcpy(&vd, pd + i, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = shift.Apply(shift.Apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^
          static_cast<uint32_t>(d);
      p += 3 * kCrc32cStreamBytes;
      size -= 3 * kCrc32cStreamBytes;
    }
  }
  return ~static_cast<uint32_t>(HardwareChain(c, p, size));
}

bool Crc32cHardwareAvailable() {
  static const bool available = __builtin_cpu_supports("sse4.2");
  return available;
}

namespace {

#define RECKON_FOLD_TARGET __attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))
// The 32-byte register's fold: VPCLMULQDQ with AVX2, no AVX-512 (AMD's
// Zen 3, Intel's cores from Alder Lake).
#define RECKON_FOLD256_TARGET __attribute__((target("sse4.2,pclmul,avx2,vpclmulqdq")))
// The 16-byte register's fold: PCLMULQDQ alone (any x86-64 since Intel's
// Westmere and AMD's Bulldozer). Its helpers inline into every fold.
#define RECKON_FOLD128_TARGET __attribute__((target("sse4.2,pclmul")))

// The fold over `bytes` bytes, as one 16-byte lane's multiplier pair: a lane
// A of 16 message bytes (its first 8, a0, the low qword; the next 8, a1)
// is the polynomial a0 x^64 + a1 (reflected: bit 0 of a byte is its highest
// power), and moved `bytes` on it is A x^(8 bytes) = a0 x^(8 bytes + 64) +
// a1 x^(8 bytes), the same CRC once reduced. A carry-less product of a
// reflected qword and a reflected 32-bit constant lands 33 powers below the
// 128-bit lane's frame, so the constants are x^(8 bytes + 64 - 33) and
// x^(8 bytes - 33) modulo P: each product is under 96 bits, and their XOR
// is a 16-byte lane again, to be XORed with the message's 16 bytes there.
struct FoldPair {
  int64_t low, high;  // for a0 and a1
};
constexpr FoldPair FoldMultipliers(uint64_t bytes) {
  return {XPowerModP(8 * bytes + 31), XPowerModP(8 * bytes - 33)};
}
// Computed once, when compiled.
constexpr FoldPair kFold16 = FoldMultipliers(16), kFold32 = FoldMultipliers(32),
                   kFold48 = FoldMultipliers(48), kFold64 = FoldMultipliers(64),
                   kFold80 = FoldMultipliers(80), kFold96 = FoldMultipliers(96),
                   kFold112 = FoldMultipliers(112), kFold128 = FoldMultipliers(128),
                   kFold160 = FoldMultipliers(160), kFold192 = FoldMultipliers(192),
                   kFold224 = FoldMultipliers(224), kFold256 = FoldMultipliers(256);

RECKON_FOLD128_TARGET __m128i Lane(FoldPair pair) { return _mm_set_epi64x(pair.high, pair.low); }

RECKON_FOLD128_TARGET __m128i FoldLane(__m128i lane, __m128i multipliers) {
  return _mm_xor_si128(_mm_clmulepi64_si128(lane, multipliers, 0x00),
                       _mm_clmulepi64_si128(lane, multipliers, 0x11));
}

// The fold's end, from one lane that holds everything before p: moved on
// 16 bytes at a time over the rest, then the lane's 16 bytes and the last
// (fewer than 16) through the crc32 instruction, from 0.
RECKON_FOLD128_TARGET uint32_t FinishFold(__m128i lane, const unsigned char* p, size_t size) {
  const __m128i by16 = Lane(kFold16);
  while (size >= 16) {
    lane =
        _mm_xor_si128(FoldLane(lane, by16), _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    p += 16;
    size -= 16;
  }
  uint64_t state = _mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(lane)));
  state = _mm_crc32_u64(state, static_cast<uint64_t>(_mm_extract_epi64(lane, 1)));
  return ~static_cast<uint32_t>(HardwareChain(state, p, size));
}

// The pair for four lanes at once. (Built from its qwords: gcc 12 warns of
// an uninitialized value inside _mm512_broadcast_i32x4.)
RECKON_FOLD_TARGET __m512i Lanes(FoldPair pair) {
  return _mm512_set_epi64(pair.high, pair.low, pair.high, pair.low, pair.high, pair.low, pair.high,
                          pair.low);
}

// Four lanes at once, XORed with the message's 64 bytes at the destination.
RECKON_FOLD_TARGET __m512i FoldLanes(__m512i lanes, __m512i multipliers, __m512i message) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lanes, multipliers, 0x00),
                                   _mm512_clmulepi64_epi128(lanes, multipliers, 0x11), message,
                                   0x96);  // a ^ b ^ c
}

}  // namespace

bool Crc32cFoldedAvailable() {
  static const bool available =
      std::string_view(IsaCeilingName()) == "avx512" && __builtin_cpu_supports("sse4.2") &&
      __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
  return available;
}

RECKON_FOLD_TARGET uint32_t Crc32cFolded(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size < kCrc32cFoldedMinBytes) return Crc32cHardware(data, size, crc);
  // From state s, the register ends where it would from 0 with s XORed
  // into the message's first four bytes (the update is linear), so the
  // lanes start from the bytes themselves.
  __m512i lanes[4];
  for (int i = 0; i < 4; ++i) lanes[i] = _mm512_loadu_si512(p + 64 * i);
  lanes[0] = _mm512_xor_si512(lanes[0], _mm512_zextsi128_si512(_mm_cvtsi32_si128(~crc)));
  p += 256;
  size -= 256;
  // Sixteen lanes, each moved 256 bytes on a round: four independent
  // chains, so that the products' latency overlaps.
  const __m512i by256 = Lanes(kFold256);
  while (size >= 256) {
    for (int i = 0; i < 4; ++i) {
      lanes[i] = FoldLanes(lanes[i], by256, _mm512_loadu_si512(p + 64 * i));
    }
    p += 256;
    size -= 256;
  }
  // Into one register of four lanes, then 64 bytes at a time.
  const __m512i by64 = Lanes(kFold64);
  for (int i = 1; i < 4; ++i) lanes[i] = FoldLanes(lanes[i - 1], by64, lanes[i]);
  __m512i last = lanes[3];
  while (size >= 64) {
    last = FoldLanes(last, by64, _mm512_loadu_si512(p));
    p += 64;
    size -= 64;
  }
  // Into one lane. (Through memory: gcc 12 warns of an uninitialized value
  // inside _mm512_extracti32x4_epi32.)
  alignas(64) __m128i four[4];
  _mm512_store_si512(four, last);
  __m128i lane = _mm_xor_si128(four[3], FoldLane(four[0], Lane(kFold48)));
  lane = _mm_xor_si128(lane, FoldLane(four[1], Lane(kFold32)));
  lane = _mm_xor_si128(lane, FoldLane(four[2], Lane(kFold16)));
  return FinishFold(lane, p, size);
}

bool Crc32cFolded256Available() {
  static const bool available =
      std::string_view(IsaCeilingName()) != "portable" && __builtin_cpu_supports("sse4.2") &&
      __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("vpclmulqdq");
  return available;
}

namespace {

// The pair for both lanes of a 32-byte register.
RECKON_FOLD256_TARGET __m256i Lanes256(FoldPair pair) {
  return _mm256_set_epi64x(pair.high, pair.low, pair.high, pair.low);
}

// Two lanes at once, XORed with the message's 32 bytes at the destination.
RECKON_FOLD256_TARGET __m256i FoldLanes256(__m256i lanes, __m256i multipliers, __m256i message) {
  return _mm256_xor_si256(_mm256_xor_si256(_mm256_clmulepi64_epi128(lanes, multipliers, 0x00),
                                           _mm256_clmulepi64_epi128(lanes, multipliers, 0x11)),
                          message);
}

}  // namespace

// Crc32cFolded in 32-byte registers: eight of them (sixteen lanes, 256
// bytes a round, as the AVX-512 fold), each moved on by x^2048 a round.
RECKON_FOLD256_TARGET uint32_t Crc32cFolded256(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size < kCrc32cFoldedMinBytes) return Crc32cHardware(data, size, crc);
  constexpr int kRegisters = 8;
  __m256i lanes[kRegisters];
  for (int i = 0; i < kRegisters; ++i) {
    lanes[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i));
  }
  lanes[0] =
      _mm256_xor_si256(lanes[0], _mm256_zextsi128_si256(_mm_cvtsi32_si128(static_cast<int>(~crc))));
  p += 32 * kRegisters;
  size -= 32 * kRegisters;
  const __m256i by256 = Lanes256(kFold256);
  while (size >= 32 * kRegisters) {
    for (int i = 0; i < kRegisters; ++i) {
      lanes[i] = FoldLanes256(lanes[i], by256,
                              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * i)));
    }
    p += 32 * kRegisters;
    size -= 32 * kRegisters;
  }
  // Into one register (register i moved on by the 32 * (7 - i) bytes after
  // it), then its two lanes into one.
  const FoldPair to_last[kRegisters - 1] = {kFold224, kFold192, kFold160, kFold128,
                                            kFold96,  kFold64,  kFold32};
  __m256i last = lanes[kRegisters - 1];
  for (int i = 0; i < kRegisters - 1; ++i) {
    last = FoldLanes256(lanes[i], Lanes256(to_last[i]), last);
  }
  const __m128i lane = _mm_xor_si128(_mm256_extracti128_si256(last, 1),
                                     FoldLane(_mm256_castsi256_si128(last), Lane(kFold16)));
  return FinishFold(lane, p, size);
}

bool Crc32cFolded128Available() {
  static const bool available = std::string_view(IsaCeilingName()) != "portable" &&
                                __builtin_cpu_supports("sse4.2") &&
                                __builtin_cpu_supports("pclmul");
  return available;
}

// Crc32cFolded in 16-byte registers: eight lanes (128 bytes a round), each
// moved on by x^1024 a round, eight independent chains so that the
// products' latency overlaps.
RECKON_FOLD128_TARGET uint32_t Crc32cFolded128(const void* data, size_t size, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  if (size < kCrc32cFoldedMinBytes) return Crc32cHardware(data, size, crc);
  constexpr int kLanes = 8;
  __m128i lanes[kLanes];
  for (int i = 0; i < kLanes; ++i) {
    lanes[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i));
  }
  lanes[0] = _mm_xor_si128(lanes[0], _mm_cvtsi32_si128(static_cast<int>(~crc)));
  p += 16 * kLanes;
  size -= 16 * kLanes;
  const __m128i by128 = Lane(kFold128);
  while (size >= 16 * kLanes) {
    for (int i = 0; i < kLanes; ++i) {
      lanes[i] = _mm_xor_si128(FoldLane(lanes[i], by128),
                               _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * i)));
    }
    p += 16 * kLanes;
    size -= 16 * kLanes;
  }
  // Into one lane: lane i moved on by the 16 * (7 - i) bytes after it.
  const FoldPair to_last[kLanes - 1] = {kFold112, kFold96, kFold80, kFold64,
                                        kFold48,  kFold32, kFold16};
  __m128i lane = lanes[kLanes - 1];
  for (int i = 0; i < kLanes - 1; ++i) {
    lane = _mm_xor_si128(lane, FoldLane(lanes[i], Lane(to_last[i])));
  }
  return FinishFold(lane, p, size);
}

#undef RECKON_FOLD_TARGET
#undef RECKON_FOLD256_TARGET
#undef RECKON_FOLD128_TARGET
#else
uint32_t Crc32cHardware(const void* data, size_t size, uint32_t crc) {
  return Crc32cPortable(data, size, crc);
}
bool Crc32cHardwareAvailable() { return false; }
uint32_t Crc32cFolded(const void* data, size_t size, uint32_t crc) {
  return Crc32cPortable(data, size, crc);
}
bool Crc32cFoldedAvailable() { return false; }
uint32_t Crc32cFolded128(const void* data, size_t size, uint32_t crc) {
  return Crc32cPortable(data, size, crc);
}
bool Crc32cFolded128Available() { return false; }
uint32_t Crc32cFolded256(const void* data, size_t size, uint32_t crc) {
  return Crc32cPortable(data, size, crc);
}
bool Crc32cFolded256Available() { return false; }
#endif

const char* Crc32cImplementation() {
  if (Crc32cFoldedAvailable()) return "AVX-512 VPCLMULQDQ fold";
  if (Crc32cFolded256Available()) return "AVX2 VPCLMULQDQ fold";
  if (Crc32cFolded128Available()) return "PCLMULQDQ fold (three crc32 streams past 24 KiB)";
  return Crc32cHardwareAvailable() ? "crc32 instruction" : "portable tables";
}

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  if (size >= kCrc32cFoldedMinBytes) {
    if (Crc32cFoldedAvailable()) return Crc32cFolded(data, size, crc);
    if (Crc32cFolded256Available()) return Crc32cFolded256(data, size, crc);
    if (Crc32cFolded128Available() && size < 3 * kCrc32cStreamBytes) {
      return Crc32cFolded128(data, size, crc);
    }
  }
  return Crc32cHardwareAvailable() ? Crc32cHardware(data, size, crc)
                                   : Crc32cPortable(data, size, crc);
}

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  // x^(8 size_b) = the product of x^(2^(k+3)) over size_b's set bits k.
  uint32_t shift = 1u << 31;  // x^0
  for (int k = 3; size_b != 0; size_b >>= 1, ++k) {
    if (size_b & 1u) shift = MultiplyModP(kPowersOfXSquared[k], shift);
  }
  return MultiplyModP(shift, crc_a) ^ crc_b;
}

void Crc32cPieces::Add(size_t begin, size_t end, uint32_t crc) {
  absl::MutexLock lock(&mu_);
  pieces_.push_back({begin, end, crc});
}

bool Crc32cPieces::Combine(size_t size, uint32_t* crc) {
  absl::MutexLock lock(&mu_);
  std::sort(pieces_.begin(), pieces_.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  uint32_t combined = 0;
  size_t covered = 0;
  for (const Piece& piece : pieces_) {
    if (piece.begin != covered) return false;
    combined = Crc32cCombine(combined, piece.crc, piece.end - piece.begin);
    covered = piece.end;
  }
  if (covered != size) return false;
  *crc = combined;
  return true;
}

uint32_t Crc32cOnThreads(const void* data, size_t size, const ParallelFor& parallel_for) {
  if (!parallel_for || size < kCrc32cThreadedBytes) return Crc32c(data, size);
  const auto* bytes = static_cast<const unsigned char*>(data);
  Crc32cPieces pieces;
  parallel_for(size, [&](size_t begin, size_t end) {
    pieces.Add(begin, end, Crc32c(bytes + begin, end - begin));
  });
  uint32_t crc;
  // The contract broken: the CRC of the bytes, not of what the chunks
  // happened to cover.
  return pieces.Combine(size, &crc) ? crc : Crc32c(data, size);
}

}  // namespace reckon::codec
