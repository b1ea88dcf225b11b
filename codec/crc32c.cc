#include "codec/crc32c.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <vector>

#include "absl/synchronization/mutex.h"

#if defined(__x86_64__)
#include <nmmintrin.h>
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
#else
uint32_t Crc32cHardware(const void* data, size_t size, uint32_t crc) {
  return Crc32cPortable(data, size, crc);
}
bool Crc32cHardwareAvailable() { return false; }
#endif

uint32_t Crc32c(const void* data, size_t size, uint32_t crc) {
  return Crc32cHardwareAvailable() ? Crc32cHardware(data, size, crc)
                                   : Crc32cPortable(data, size, crc);
}

namespace {

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

}  // namespace

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b) {
  // x^(8 size_b) = the product of x^(2^(k+3)) over size_b's set bits k.
  uint32_t shift = 1u << 31;  // x^0
  for (int k = 3; size_b != 0; size_b >>= 1, ++k) {
    if (size_b & 1u) shift = MultiplyModP(kPowersOfXSquared[k], shift);
  }
  return MultiplyModP(shift, crc_a) ^ crc_b;
}

uint32_t Crc32cOnThreads(const void* data, size_t size, const ParallelFor& parallel_for) {
  if (!parallel_for || size < kCrc32cThreadedBytes) return Crc32c(data, size);
  const auto* bytes = static_cast<const unsigned char*>(data);
  struct Piece {
    size_t begin, end;
    uint32_t crc;
  };
  absl::Mutex mu;
  std::vector<Piece> pieces;  // one a chunk: a few
  parallel_for(size, [&](size_t begin, size_t end) {
    const uint32_t crc = Crc32c(bytes + begin, end - begin);
    absl::MutexLock lock(&mu);
    pieces.push_back({begin, end, crc});
  });
  std::sort(pieces.begin(), pieces.end(),
            [](const Piece& a, const Piece& b) { return a.begin < b.begin; });
  uint32_t crc = 0;
  size_t covered = 0;
  for (const Piece& piece : pieces) {
    if (piece.begin != covered) break;  // a ParallelFor that broke its contract
    crc = Crc32cCombine(crc, piece.crc, piece.end - piece.begin);
    covered = piece.end;
  }
  // The contract broken (a gap, an overlap, a range left out): the CRC of
  // the bytes, not of what the chunks happened to cover.
  return covered == size ? crc : Crc32c(data, size);
}

}  // namespace reckon::codec
