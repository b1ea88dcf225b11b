// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as used for the
// `crc32c` field of an Update (docs/wire.md §4). Thread-safe, no allocation.
#ifndef RECKON_CODEC_CRC32C_H_
#define RECKON_CODEC_CRC32C_H_

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "codec/parallel_for.h"

namespace reckon::codec {

// CRC-32C of `size` bytes at `data`, continuing from `crc` (0 to start).
// Uses carry-less multiplication (below) or the SSE4.2 crc32 instruction
// when the CPU has them, else the portable slicing-by-8 version; all give
// identical results.
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

// A CRC-32C computed in pieces, each piece's from its own bytes on the
// thread that has them (Crc32cOnThreads; the dense codec's passes, which
// compute it block by block beside their other work while each block is in
// the L1 cache), then combined in order.
// Threads: Add from any thread; Combine after every Add has returned.
class Crc32cPieces {
 public:
  // The CRC of bytes [begin, end), from 0.
  void Add(size_t begin, size_t end, uint32_t crc);
  // The CRC of bytes [0, size) when the pieces cover exactly that; false
  // when they do not (a ParallelFor that broke its contract: a gap, an
  // overlap, a range left out), and the caller computes it from the bytes.
  bool Combine(size_t size, uint32_t* crc);

 private:
  struct Piece {
    size_t begin, end;
    uint32_t crc;
  };
  absl::Mutex mu_;
  std::vector<Piece> pieces_ ABSL_GUARDED_BY(mu_);  // one a chunk: a few
};

// The hardware path splits a long buffer into rounds of three streams of
// this many bytes, crc'd side by side (the crc32 instruction's latency is
// three cycles, its throughput one a cycle) and combined (a stream's crc
// shifted past the next by a table of the "append this many zero bytes"
// operator): about three times one chain's speed past 24 KiB.
inline constexpr size_t kCrc32cStreamBytes = 8192;

// From kCrc32cFoldedMinBytes on, where the CPU has VPCLMULQDQ (AVX-512's
// carry-less multiply: Intel from Ice Lake, AMD from Zen 4), the bytes are
// folded instead, 256 a round: sixteen 16-byte lanes, each multiplied on by
// x^2048 modulo the polynomial (carry-less products), then folded into one
// lane that the crc32 instruction finishes. On an AMD Zen 5 core, 2x the
// three streams' speed on a dense payload of 2.7 MB (0.040 against 0.080
// ms), 4x on 98 KB (docs/benchmarks.md "CRC32C by carry-less
// multiplication"). Without AVX-512 the same fold runs in 32-byte
// registers where the CPU has VPCLMULQDQ with AVX2 (AMD's Zen 3), else in
// 16-byte ones where it has PCLMULQDQ: on a Zen 3 core a 16 KB block (the
// dense passes' kCacheBlockValues, where the three streams do not start)
// at 15-21 and 11 bytes a ns against one chain's 7.7. The 16-byte fold
// stops where the three streams start (3 * kCrc32cStreamBytes): past it
// they are the faster (on a Zen 5 core, 2.7 MB at 27 bytes a ns against
// the 16-byte fold's 14; a 16 KB block 9.5 against 14). RECKON_CPU_ISA
// caps which fold runs as it caps every vector copy (codec/elementwise.h).
inline constexpr size_t kCrc32cFoldedMinBytes = 256;

// What Crc32c runs from kCrc32cFoldedMinBytes on, in words (benchmarks
// print it beside their figures).
const char* Crc32cImplementation();

// The implementations, exposed so that tests can compare them. Crc32c
// chooses the fastest the CPU has.
uint32_t Crc32cPortable(const void* data, size_t size, uint32_t crc = 0);
// REQUIRES: Crc32cHardwareAvailable().
uint32_t Crc32cHardware(const void* data, size_t size, uint32_t crc = 0);
bool Crc32cHardwareAvailable();
// REQUIRES: Crc32cFoldedAvailable(). Below kCrc32cFoldedMinBytes it is
// Crc32cHardware.
uint32_t Crc32cFolded(const void* data, size_t size, uint32_t crc = 0);
bool Crc32cFoldedAvailable();
// The same fold in 32-byte registers (VPCLMULQDQ with AVX2), sixteen lanes
// (256 bytes) a round. REQUIRES: Crc32cFolded256Available(). Below
// kCrc32cFoldedMinBytes it is Crc32cHardware.
uint32_t Crc32cFolded256(const void* data, size_t size, uint32_t crc = 0);
bool Crc32cFolded256Available();
// The same fold in 16-byte registers, eight lanes (128 bytes) a round:
// PCLMULQDQ alone (Intel from Westmere, AMD from Bulldozer; Zen 2 and
// Skylake's servers among them). REQUIRES: Crc32cFolded128Available().
// Below kCrc32cFoldedMinBytes it is Crc32cHardware.
uint32_t Crc32cFolded128(const void* data, size_t size, uint32_t crc = 0);
bool Crc32cFolded128Available();

}  // namespace reckon::codec

#endif  // RECKON_CODEC_CRC32C_H_
