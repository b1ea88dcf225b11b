// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used for the
// `crc32c` field of an Update (docs/wire.md §4). Thread-safe, no allocation.
#ifndef RECKON_CODEC_CRC32C_H_
#define RECKON_CODEC_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace reckon::codec {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start).
// Uses the SSE4.2 crc32 instruction when the CPU has it, else the portable
// slicing-by-8 version; both give identical results.
uint32_t Crc32c(const void* data, size_t size, uint32_t crc = 0);
inline uint32_t Crc32c(std::string_view bytes) { return Crc32c(bytes.data(), bytes.size()); }

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
