// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used for the
// `crc32c` field of an Update (docs/wire.md §4). Thread-safe, no allocation.
#ifndef RECKON_CODEC_CRC32C_H_
#define RECKON_CODEC_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "codec/parallel_for.h"

namespace reckon::codec {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start).
// Uses the SSE4.2 crc32 instruction when the CPU has it, else the portable
// slicing-by-8 version; both give identical results.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

// The CRC-32C of A followed by B, from crc_a = Crc32c(A), crc_b = Crc32c(B)
// and B's length alone (zlib's crc32_combine: crc_a times x^(8 size_b)
// modulo the polynomial, from a table of x^(2^k); about 32 steps per set
// bit of size_b's, no pass over the bytes).
uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, uint64_t size_b);

// Crc32c(data, size) with the bytes split over parallel_for's chunks (each
// chunk's CRC computed on its thread, then combined in order): the same
// value. Below kCrc32cThreadedBytes, or with a null parallel_for, one call
// on this thread (a wake-up costs more than such a CRC).
uint32_t Crc32cOnThreads(const void* data, size_t size, const ParallelFor& parallel_for);
inline uint32_t Crc32cOnThreads(std::string_view bytes, const ParallelFor& parallel_for) {
  return Crc32cOnThreads(bytes.data(), bytes.size(), parallel_for);
}
inline constexpr size_t kCrc32cThreadedBytes = 256 * 1024;

// The hardware path splits a long buffer into rounds of three streams of
// this many bytes, crc'd side by side (the crc32 instruction's latency is
// three cycles, its throughput one a cycle) and combined (a stream's crc
// shifted past the next by a table of the "append this many zero bytes"
// operator): about three times one chain's speed past 24 KiB.
inline constexpr size_t kCrc32cStreamBytes = 8192;

// The two implementations, exposed so that tests can compare them.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc = 0);
// REQUIRES: Crc32cHardwareAvailable().
uint32_t Crc32cHardware(const void* data, size_t size, uint32_t crc = 0);
bool Crc32cHardwareAvailable();

}  // namespace reckon::codec

#endif  // RECKON_CODEC_CRC32C_H_
