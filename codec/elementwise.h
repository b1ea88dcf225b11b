// The passes over every parameter that a quanta codec's round trip makes
// each step (encode, decode, error feedback, a dense apply's sum and float
// copy), each
// compiled twice: for any x86-64, and for AVX-512, where the int64 <-> float
// conversions they need vectorize (the dense encode of 669,706 values: 3.5
// ms -> 0.18 ms on this VM's AMD EPYC). Which copy runs is chosen once, at
// run time, from the CPU. Both give the same bits: the same IEEE operations
// in the same order, compiled without contraction (codec/CMakeLists.txt),
// so replicas agree across machines with and without AVX-512
// (tests/quanta_codec_test.cc holds both to the scalar definitions).
//
// Threads: functions over the spans given, any thread (a caller's
// ParallelFor splits the ranges). Errors: none.
#ifndef RECKON_CODEC_ELEMENTWISE_H_
#define RECKON_CODEC_ELEMENTWISE_H_

#include <cstddef>
#include <cstdint>

namespace reckon::codec {

// kBest: AVX-512 where the CPU has it (F, DQ, VL, BW), else AVX2 where it
// has that, else portable. kPortable: the copy for any x86-64 (tests
// compare the copies). kAvx2: a function's AVX2 copy where it has one and
// the CPU has AVX2 (every function here has one, and the weight checksum),
// else portable.
enum class Isa { kBest, kPortable, kAvx2 };

// Values a pass takes at a time where more work follows on the same values
// (the dense encode, then its CRC and feedback; a dense scan's CRC, walk
// and copy): 16 KiB of payload and of residual, so what follows reads them
// from the L1 cache.
constexpr size_t kCacheBlockValues = 4096;
// Whether the CPU has the instructions and RECKON_CPU_ISA allows them. That
// environment variable, read once, caps every vector copy the codec chooses
// (these passes, the weight checksum, the CRC's folds, the Rice coder's):
// "avx512" (or unset) everything the CPU has; "avx2" as on a CPU without
// AVX-512 (AMD's Zen 3: AVX2 copies, the CRC folded in 32-byte registers);
// "portable" the copies for any x86-64 (the CRC in three crc32 streams). It
// lets one machine measure what another runs (docs/benchmarks.md, "On a
// core with AVX2 and not AVX-512"); any other value stops the process with
// a line naming it. It does not reach OpenBLAS (OPENBLAS_CORETYPE does).
bool Avx512Available();
bool Avx2Available();
// What RECKON_CPU_ISA allowed: "avx512", "avx2" or "portable".
const char* IsaCeilingName();
// Whether a function's AVX-512 copy runs for `isa` (the CPU has it and
// kBest asks for it).
bool UseAvx512(Isa isa);
// Whether a function's AVX2 copy runs for `isa` (kAvx2, or kBest without
// AVX-512, on a CPU with AVX2).
bool UseAvx2(Isa isa);
// Which copy of the dense passes runs for `isa`, in words ("AVX-512",
// "AVX2", "portable"; benchmarks print it beside their figures).
const char* ElementwiseCopy(Isa isa);

// For i in [0, n): the dense fp32 payload value of values[i]
// (QuantaPayloadValue, codec.h), stored as four little-endian bytes at
// payload + 4 i. The payload is the message's decoded form too
// (quanta_span.h): nothing else is written.
void EncodeDenseFp32Values(const float* values, size_t n, int fraction_bits, char* payload,
                           Isa isa = Isa::kBest);

// The dense fp32 payload's values as quanta: quanta[i] is the value stored
// as four little-endian bytes at payload + 4 i, truncated. Returns whether
// every value is an integral number of quanta below 2^62 in magnitude
// (PayloadValueToQuanta, codec.h); where one is not, its quanta[i] is
// unspecified and the caller refuses the whole payload.
bool DecodeDenseFp32Values(const char* payload, size_t n, int64_t* quanta, Isa isa = Isa::kBest);

// Whether DecodeDenseFp32Values would succeed on the payload and give
// exactly `quanta`: one pass that reads both and writes nothing (the
// publisher's self-check, which so needs no decoded vector to fill and
// compare: 12 bytes a value read, not 24 moved).
bool DenseFp32ValuesEqual(const char* payload, const int64_t* quanta, size_t n,
                          Isa isa = Isa::kBest);

// Whether every value of the payload is one (DecodeDenseFp32Values would
// succeed): the validity walk, reading 4 bytes a value and writing nothing
// (every reader's check of a dense message and the publisher's self-check,
// a dense message being its own decoded form).
bool DenseFp32ValuesValid(const char* payload, size_t n, Isa isa = Isa::kBest);

// Whether both payloads' values are valid (DecodeDenseFp32Values would
// succeed on each) and decode to the same quanta: one pass that writes
// nothing.
bool DenseFp32PayloadsEqual(const char* payload, const char* expected, size_t n,
                            Isa isa = Isa::kBest);

// The float copy a replica keeps beside its quanta (fixed_point.h), for
// the sums below to write in their loop where `weights` is not null:
// weights[i] = QuantaToFloats' value of quanta[i] after the sum.
// The AVX-512 and AVX2 copies write it with non-temporal (streaming)
// stores, which neither read a line before writing it nor keep it in the
// caches: the model's next forward pass reads the copy, and in a worker the
// step's GEMMs have evicted it by then whatever its size (a dense worker's
// apply took 6.2-7.8% of its samples with cached stores, 3.3-5.4% streamed;
// docs/benchmarks.md "The float copy streamed"). They end with a store
// fence, so the copy is visible to any thread that joins the caller after
// it returns, as with ordinary stores.
struct FloatCopyOut {
  float* weights = nullptr;
  double quantum = 0;
};

// The dense apply's sum from a checked dense payload (quanta_span.h): as
// AddQuantaWrapping with delta[i] the payload's value i.
uint64_t AddDenseFp32Wrapping(int64_t* quanta, const char* payload, size_t n,
                              FloatCopyOut copy = {}, Isa isa = Isa::kBest);

// Error feedback from a checked dense payload: SubtractQuanta with quanta[i]
// the payload's value i and quantum 2^-fraction_bits, fraction_bits in
// [0, kMaxFractionBits] (the same bits: the values are integers below
// 2^62, and the product is computed in float, exactly as rounded).
void SubtractDenseFp32(float* residual, const char* payload, size_t n, int fraction_bits,
                       Isa isa = Isa::kBest);

// The dense apply's sum: quanta[i] += delta[i] modulo 2^64 (the replica's
// arithmetic), and the float copy where `copy` has one; returns how many
// of the signed sums left the int64 range. `quanta`, `delta` and the copy
// must not overlap.
uint64_t AddQuantaWrapping(int64_t* quanta, const int64_t* delta, size_t n, FloatCopyOut copy = {},
                           Isa isa = Isa::kBest);

// Error feedback: residual[i] -= (float)((double)quanta[i] * quantum).
void SubtractQuanta(float* residual, const int64_t* quanta, size_t n, double quantum,
                    Isa isa = Isa::kBest);

// The float copy: weights[i] = (float)((double)quanta[i] * quantum)
// (QuantaToFloat, fixed_point.h).
void QuantaToFloats(const int64_t* quanta, size_t n, double quantum, float* weights,
                    Isa isa = Isa::kBest);

// The dyntree8 encoder's loop over `n` values of one tensor: codes[i] is
// DynTreeNearestCode(|values[i]| * to_normalized) (codec.h), with bit 7
// set for a negative value whose code is not 0, and quanta[i] is
// magnitudes[code], negated with that sign (`magnitudes`: 128 entries,
// DynTreeQuanta of each code at the tensor's scale).
void DynTreeEncodeValues(const float* values, size_t n, double to_normalized,
                         const int64_t* magnitudes, char* codes, int64_t* quanta,
                         Isa isa = Isa::kBest);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_ELEMENTWISE_H_
