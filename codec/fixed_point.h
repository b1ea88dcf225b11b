// Fixed-point replicas (docs/wire.md §2): every parameter is a signed 64-bit count
// of quanta q = 2^-fraction_bits, plus the float32 copy the model computes
// with, always equal to (float)((double)fixed * q). Applying a message is
// integer addition, so replicas that applied the same messages are
// bit-identical whatever the order.
//
// Threads: a FixedPointReplica is one thread's at a time (a caller's
// ParallelFor may stripe one Apply, each stripe its own parameters);
// ThresholdStep and SplitMix64 are values. Errors: a message or weights of
// another size, or words not strictly ascending below the model's size,
// are kInvalidArgument and change nothing.
#ifndef RECKON_CODEC_FIXED_POINT_H_
#define RECKON_CODEC_FIXED_POINT_H_

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "base/huge_pages.h"
#include "codec/parallel_for.h"
#include "codec/quanta_span.h"

namespace reckon::codec {

inline constexpr int kDefaultFractionBits = 32;
inline constexpr int kMaxFractionBits = 62;

// The magnitude of one threshold step: `step_quanta` quanta, and the same
// value as a float32, `tau`, which is exact (tau == step_quanta * 2^-fb in
// real arithmetic), so what the quantizer subtracts from its residual is
// exactly what every peer adds.
struct ThresholdStep {
  int fraction_bits = kDefaultFractionBits;
  int64_t step_quanta = 0;
  float tau = 0;
};

// The step closest to `threshold` that lies on the grid and is exact as a
// float32: step_quanta = round(threshold * 2^fb), then rounded to 24
// significant bits. kInvalidArgument when threshold is not finite and
// positive, is below half a quantum, or does not fit.
absl::StatusOr<ThresholdStep> MakeThresholdStep(double threshold, int fraction_bits);

// The float32 weight of `quanta` quanta at `fraction_bits`.
inline float QuantaToFloat(int64_t quanta, double quantum) {
  return static_cast<float>(static_cast<double>(quanta) * quantum);
}

// SplitMix64 (Steele, Lea, Flood 2014): portable, the same stream on every
// platform and standard library. Used for all seeded initialization.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, bound], exact and unbiased (rejection; integer math only).
  uint64_t Uniform(uint64_t bound);

 private:
  uint64_t state_;
};

// One replica. Not thread-safe: callers serialize Apply and reads (the
// worker applies between training steps).
// SHA-256 of `quanta` as little-endian int64, lower-case hex: the weight
// hash of a replica holding them (snapshots and status hash copies).
std::string WeightHashOf(std::span<const int64_t> quanta);

class FixedPointReplica {
 public:
  // Whether the replica keeps the float32 copy: a model computes with it; a
  // gossip node's mirror (snapshots, hashes) needs only the quanta, and
  // without the copy an update touches one array, not two (the node's apply
  // is bound by those cache misses: docs/benchmarks.md "Inbound").
  enum class FloatCopy { kKept, kNone };
  // Whether Apply prefetches the parameters it will touch a few updates
  // ahead: the misses overlap instead of waiting one by one (0.50 ms for
  // 44,000 updates into 14.6M parameters without, 0.24 ms with and no float
  // copy, on this 2-core VM). kOff only for the benchmark's "before" path.
  enum class Prefetch { kOn, kOff };

  // kInvalidArgument when param_count > 2^31 or fraction_bits is outside
  // [0, 62]. All parameters start at zero.
  static absl::StatusOr<FixedPointReplica> Create(uint64_t param_count, int fraction_bits,
                                                  FloatCopy floats = FloatCopy::kKept);

  uint64_t param_count() const { return quanta_.size(); }
  int fraction_bits() const { return fraction_bits_; }
  double quantum() const { return quantum_; }
  std::span<const int64_t> quanta() const { return quanta_; }
  // Empty with FloatCopy::kNone.
  std::span<const float> weights() const { return weights_; }
  bool keeps_floats() const { return floats_ == FloatCopy::kKept; }

  // Sets parameters [begin, begin + count) uniformly at random in
  // [-limit, +limit], on the grid, from (seed, stream) alone: integer
  // arithmetic only, so every machine builds the same replica. `stream`
  // separates the tensors of one model (e.g. the layer number).
  // kInvalidArgument when the range is outside the replica or limit is not
  // finite and non-negative.
  absl::Status InitializeUniform(uint64_t seed, uint64_t stream, uint64_t begin, uint64_t count,
                                 double limit);

  // Adds step_quanta (sign 0) or -step_quanta (sign 1) to each update's
  // parameter, modulo 2^64 (docs/wire.md: a sum past the int64 range wraps,
  // on every replica and backend alike; wrapping addition is associative
  // and commutative, so the same messages in any order still give the same
  // quanta, and nothing a peer sends can stall its origin). All or nothing:
  // validates every word (index < param_count, strictly ascending) before
  // changing anything, and refreshes the float32 copy of exactly the touched
  // weights. kInvalidArgument when validation fails; the replica is then
  // unchanged. Additions that wrapped are counted (wrapped()).
  // `parallel_for` (optional) applies the words in stripes on the caller's
  // threads: strictly ascending, each run of words touches parameters no
  // other run does, so no stripe waits for another, and the result is the
  // same bit for bit. The apply is a cache miss per update, so stripes
  // overlap more misses: 44,000 updates into 14.6M parameters take 0.41 ms
  // on one thread of this 2-core VM, 0.21 ms on two.
  using ParallelFor = codec::ParallelFor;
  absl::Status Apply(int64_t step_quanta, std::span<const uint32_t> words,
                     Prefetch prefetch = Prefetch::kOn, const ParallelFor& parallel_for = nullptr);

  // Adds delta[i] quanta to every parameter i (a quanta codec's update, in
  // either layout: quanta_span.h), modulo 2^64 as Apply does.
  // kInvalidArgument, with the replica unchanged, when the size differs or
  // the delta lies in the replica's own quanta. `parallel_for` (optional)
  // spreads the pass over the caller's threads.
  absl::Status ApplyDense(QuantaSpan delta, const ParallelFor& parallel_for = nullptr);

  // ApplyDense of a dense fp32 payload (4 bytes a value, quanta_span.h)
  // checked in the same pass, block by block while each is in the L1 cache,
  // as every receiver checks one (codec_payload.h CheckDenseFp32Payload):
  // its CRC-32C must be `crc` and every value a count of quanta. All or
  // nothing: a payload that fails either check leaves the replica as it
  // was (every block already added is subtracted again, modulo 2^64, and
  // its float copy rewritten from the quanta; wrapped() unchanged), and the
  // error is the receivers' (kDataLoss naming the CRC or the first bad
  // value). kInvalidArgument, changing nothing, for a payload of another
  // size or one in the replica's own memory.
  absl::Status ApplyCheckedDenseFp32(std::string_view payload, uint32_t crc,
                                     const ParallelFor& parallel_for = nullptr);

  // Additions that left the int64 range and wrapped, since creation: no
  // training makes one (a weight of 2^63 quanta), so it is a hostile or
  // broken peer's step.
  uint64_t wrapped() const { return wrapped_; }

  // Replaces every parameter (snapshots, checkpoints). kInvalidArgument when
  // the size differs.
  absl::Status Load(std::span<const int64_t> quanta);

  // SHA-256 of the parameters as little-endian int64, lower-case hex: the
  // replica's identity, equal exactly when the replicas are bit-identical.
  std::string WeightHash() const;

 private:
  // A dense update's `bytes` from `first`, `value_bytes` a value, as
  // ApplyDense and ApplyCheckedDenseFp32 take it: kInvalidArgument unless it
  // has one value a parameter and lies outside the replica's own quanta.
  absl::Status CheckDenseUpdateBytes(const char* first, size_t bytes, size_t value_bytes) const;

  FixedPointReplica(uint64_t param_count, int fraction_bits, FloatCopy floats);

  int fraction_bits_;
  double quantum_;
  // Touched at random by every applied update: huge pages where the kernel
  // gives them (base/huge_pages.h).
  std::vector<int64_t, base::RandomAccessAllocator<int64_t>> quanta_;
  FloatCopy floats_;
  std::vector<float, base::RandomAccessAllocator<float>> weights_;
  uint64_t wrapped_ = 0;
};

}  // namespace reckon::codec

#endif  // RECKON_CODEC_FIXED_POINT_H_
