#include "codec/crc32c.h"

#include <array>
#include <bit>
#include <cstring>

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

}  // namespace reckon::codec
