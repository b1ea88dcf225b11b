// The codecs whose decoded message is a whole number of quanta for every
// parameter: dense fp32, Seide's 1-bit SGD and Dettmers' 8-bit dynamic tree
// (docs/wire-codecs.md is their normative byte-by-byte specification).
//
// Contract shared by all of them:
// - Encode reads values (the residual: accumulated optimizer deltas, in
//   weight units) and never changes them; it writes the payload fields of an
//   Update and `*quanta`, exactly what decoding that Update gives (the
//   dense codec's payload is that itself: EmittedQuanta). Error
//   feedback is not the codec's business: EncodeWithFeedback (below) wraps
//   every codec alike.
// - Decoding (DecodeUpdate in update_message.h) needs nothing but the
//   message: the tensor layout travels in the payload and every value is a
//   float32 holding an integral number of quanta, so the decoded quanta do
//   not depend on the receiver's fraction bits, machine or order of apply.
// - The threshold codecs (docs/wire.md 3) are not here: their decoded form is
//   sparse words, and their error feedback (Strom's residual) is fused into
//   the quantizer scan for speed (quantizer.h, cuda/threshold_pass.h).
//
// Threads: a Codec and its CodecState are one thread's at a time (the
// training thread); the free functions keep no state, any thread.
// Errors: input that cannot be encoded is kInvalidArgument, a payload
// that does not decode kDataLoss; each names the field.
#ifndef RECKON_CODEC_CODEC_H_
#define RECKON_CODEC_CODEC_H_

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "codec/parallel_for.h"
#include "codec/quanta_span.h"
#include "proto/reckon.pb.h"

namespace reckon::codec {

// One tensor of the flat parameter vector: `rows` x `cols`, row-major. A
// column is the elements sharing a column index (stride `cols`): for a
// weight matrix W[out][in], everything fed by one input unit. A bias vector
// is `out` x 1: a single column.
struct TensorShape {
  uint32_t rows = 0;
  uint32_t cols = 0;
  uint64_t size() const { return uint64_t{rows} * cols; }
  bool operator==(const TensorShape&) const = default;
};

// The tensors, in the flat vector's order; their sizes sum to param_count.
using TensorLayout = std::vector<TensorShape>;
uint64_t LayoutParamCount(const TensorLayout& layout);

// Which codec, and its knobs (flags --codec, --error-feedback, --absmax-every).
struct CodecOptions {
  v1::Codec codec = v1::CODEC_DENSE_FP32;
  TensorLayout layout;     // onebit and dyntree8 (dense: one tensor is enough)
  int fraction_bits = 32;  // the replica's grid: values * 2^fb are quanta
  bool error_feedback = true;
  int absmax_every = 1;  // dyntree8: recompute each tensor's abs max every K steps
};

// The largest magnitude, in quanta, of any value a payload carries: float32
// integers below 2^62 (docs/wire-codecs.md 1).
inline constexpr double kMaxPayloadQuanta = 4611686018427387904.0;  // 2^62

// What a codec carries from one step to the next besides the residual:
// dyntree8's per-tensor scales and its count of encoded steps (which says
// when it next rescales). The others carry nothing. Checkpointed with the
// residual, so that a resumed run encodes as the uninterrupted one does.
struct CodecState {
  uint64_t steps = 0;
  std::vector<float> scales;  // payload values, one a tensor
  bool operator==(const CodecState&) const = default;
};

class Codec {
 public:
  virtual ~Codec() = default;
  virtual v1::Codec id() const = 0;
  virtual CodecState State() const { return {}; }
  // Takes up a State() of a codec with the same options. kInvalidArgument,
  // naming what is wrong, for state this codec cannot have had (scales of
  // another count or not integral numbers of quanta in [0, 2^52]; any
  // state for a codec that keeps none); the codec is unchanged then.
  virtual absl::Status Restore(const CodecState& state);
  // Called by an encoder for ranges [begin, end) of the quanta (the dense
  // codec: the payload's values) it has written for good: every index
  // exactly once, on the thread that wrote it. The encoder reads
  // values[begin, end) no more after the call, so the callee may rewrite
  // them (EncodeWithFeedback's feedback, which so finds a dense block's
  // values and payload still in the cache). An encoder that fails has
  // reported no range.
  using QuantaWritten = std::function<void(size_t begin, size_t end)>;

  // Fills codec, param_count, count, step_quanta (0), rice_k (0), payload and
  // crc32c of `*msg` from `values` and writes the decoded quanta (onebit,
  // dyntree8; the dense codec leaves `*quanta` empty: its payload is its
  // decoded form, EmittedQuanta below). REQUIRES:
  // every value finite with |value| * 2^fb < 2^62 (EncodeWithFeedback checks
  // this first) and values.size() == the layout's param_count. The payload
  // and `*quanta` may hold anything on entry (a previous emission's buffers,
  // kept at their size so that they are not zeroed each step): they are
  // overwritten whole.
  // `parallel_for` (may be null): a codec whose pass is elementwise (dense,
  // dyntree8's codes) splits it over those threads; the message is the same
  // bit for bit. `written` (may be null): see QuantaWritten.
  virtual absl::Status Encode(std::span<const float> values, v1::Update* msg,
                              std::vector<int64_t>* quanta, const ParallelFor& parallel_for,
                              const QuantaWritten& written) = 0;
  absl::Status Encode(std::span<const float> values, v1::Update* msg,
                      std::vector<int64_t>* quanta) {
    return Encode(values, msg, quanta, nullptr, nullptr);
  }
};

// kInvalidArgument when the options do not make a codec of these (unknown
// codec, empty or oversized layout, absmax_every < 1, fraction_bits outside
// [0, 62]).
absl::StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecOptions& options);

// The codec's flag name (threshold, onebit, dyntree8, dense) and back.
std::string CodecFlagName(v1::Codec codec);
// The wire's label on /metrics: the threshold coder (rice, packed32) or the
// quanta codec's flag name.
std::string WireCodecLabel(v1::Codec codec);
absl::StatusOr<v1::Codec> CodecFromFlagName(const std::string& name);

// Error feedback (Seide 2014 section 3; Strom's residual is the same idea):
// encodes `residual`, then keeps in it exactly what the message did not
// carry, residual[i] -= quanta[i] * 2^-fb (float32 arithmetic), or, without
// feedback, drops it (residual = 0). All or nothing: a NaN, Inf or value too
// large for the grid returns kInvalidArgument naming its index, with the
// residual unchanged and nothing emitted.
// `parallel_for` (may be null): the check, the encoder and the feedback on
// the caller's threads, bit for bit what one thread gives.
// `residual_bound`: the largest |residual[i]| as float bits (bits &
// 0x7FFFFFFF), where its writer took it as it wrote (model::AccumulateDelta);
// below the grid's limit the check reads nothing (it was a pass of its own
// over the residual, 2% of a dense step). REQUIRES: it is not below the
// true one. kResidualBoundUnknown (the default), or a bound at or above the
// limit: the check scans the residual and names the element.
inline constexpr uint32_t kResidualBoundUnknown = 0xFFFFFFFFu;
// |x| as its float bits, what a residual bound holds: ordered as the
// magnitudes, Inf above every finite value and NaN above Inf. Signed (the
// sign bit is clear), so that a max over them vectorizes on SSE2.
inline int32_t ResidualMagnitudeBits(float x) { return std::bit_cast<int32_t>(x) & 0x7FFFFFFF; }
// Raises a bound its writer's threads share to `chunk_bound` where it is lower.
inline void RaiseResidualBound(std::atomic<uint32_t>& bound, uint32_t chunk_bound) {
  uint32_t seen = bound.load(std::memory_order_relaxed);
  while (chunk_bound > seen &&
         !bound.compare_exchange_weak(seen, chunk_bound, std::memory_order_relaxed)) {
  }
}
absl::Status EncodeWithFeedback(Codec& codec, const CodecOptions& options,
                                std::span<float> residual, v1::Update* msg,
                                std::vector<int64_t>* quanta,
                                const ParallelFor& parallel_for = nullptr,
                                uint32_t residual_bound = kResidualBoundUnknown);

// The bits of |r| (ResidualMagnitudeBits) at and above which a residual
// value is not encoded: |r| * 2^fb >= 2^62, Inf and NaN.
inline int32_t ResidualLimitBits(int fraction_bits) {
  return std::bit_cast<int32_t>(std::ldexp(1.0f, 62 - fraction_bits));
}

// EncodeWithFeedback for the dense codec made inside its caller's own pass
// over the residual, block by block while each block is in the L1 cache:
// the CPU backend's optimizer writes a block of the residual and encodes it
// at once, instead of a second pass that reads the whole residual again and
// writes it back (docs/benchmarks.md "The encode in the optimizer's pass").
// The message and the residual it leaves are EncodeWithFeedback's, bit for
// bit, and so is its all or nothing: a value it cannot encode leaves the
// residual as the caller's pass wrote it (every block fed back is given its
// feedback back, exactly: see Finish) and emits nothing.
//
// Threads: Chunks on any threads at once, each over values no other chunk
// has; Finish on one thread once every Chunk is destroyed.
class DenseFeedbackPass {
 public:
  // Blocks of this many values (or fewer at a chunk's end) keep each
  // block's residual and payload in the L1 cache.
  static constexpr size_t kBlockValues = 4096;
  // Whether `options` is the dense codec with its error feedback on: a
  // residual fed back is exactly undone, one dropped (no feedback) is not.
  static bool UsableFor(const CodecOptions& options);
  // REQUIRES UsableFor(options). `options`, `residual` and `*msg` are the pass's until
  // Finish returns; msg's payload is sized for the residual here (kept at
  // its size, not zeroed, when it already is: codec.h Encode).
  DenseFeedbackPass(const CodecOptions& options, std::span<float> residual, v1::Update* msg);

  // The caller's pass over values [begin, ...) on one thread: blocks in
  // order, each where the last ended.
  class Chunk {
   public:
    Chunk(DenseFeedbackPass& pass, size_t begin) : pass_(pass), begin_(begin), next_(begin) {}
    // Encodes the chunk's next `len` values and feeds their residual back,
    // given their largest |value| as float bits (ResidualMagnitudeBits,
    // as model::AccumulateDelta returns it; REQUIRES it is not below the
    // true one). A block at or above ResidualLimitBits is not encoded, nor
    // is any later block of this chunk: Finish reports it.
    void Encode(size_t len, uint32_t block_bound);
    // Hands what it encoded (and its CRC) to the pass.
    ~Chunk();
    Chunk(const Chunk&) = delete;
    Chunk& operator=(const Chunk&) = delete;

   private:
    DenseFeedbackPass& pass_;
    const size_t begin_;
    size_t next_;
    uint32_t crc_ = 0;
    bool stopped_ = false;
  };

  // OK with the message's header and CRC filled when the chunks encoded
  // every value (`quanta` emptied: the dense payload is its own decoded
  // form). Otherwise every encoded block's feedback is undone, and what
  // EncodeWithFeedback(residual) then does is returned: its error naming
  // the value it cannot encode, with the residual as the pass found it
  // and nothing emitted; or, where the chunks merely left values out (a
  // ParallelFor that broke its contract), the whole message encoded again
  // on parallel_for's threads.
  absl::Status Finish(std::vector<int64_t>* quanta, const ParallelFor& parallel_for);

 private:
  struct Encoded {
    size_t begin, end;
    uint32_t crc;
  };
  const CodecOptions& options_;
  const std::span<float> residual_;
  v1::Update* const msg_;
  char* const payload_;
  const int32_t limit_bits_;
  absl::Mutex mu_;
  std::vector<Encoded> encoded_ ABSL_GUARDED_BY(mu_);  // one a chunk (a few)
};

// An encoded message's decoded form: for CODEC_DENSE_FP32 the payload
// itself (quanta_span.h), else `quanta` as the encoder wrote them. A view
// of `msg`'s payload or of `quanta`: valid while neither changes.
inline QuantaSpan EmittedQuanta(const v1::Update& msg, const std::vector<int64_t>& quanta) {
  if (msg.codec() == v1::CODEC_DENSE_FP32) return QuantaSpan::DenseFp32(msg.payload());
  return QuantaSpan(quanta);
}

// --- The pieces the encoders, decoders, kernels and tests share. ---

// A float32 payload value as quanta: nullopt-like failure (false) when it is
// not finite, not an integer, or |v| >= 2^62.
bool PayloadValueToQuanta(float v, int64_t* quanta);
// 2^e exactly, for e in [-1022, 1023]: multiplying by it is std::ldexp(x, e)
// (both are the correctly rounded x * 2^e).
inline double ExactPowerOfTwo(int e) {
  return std::bit_cast<double>(static_cast<uint64_t>(1023 + e) << 52);
}

// std::nearbyint(x) in the default rounding mode (to nearest, ties to even).
// A float of magnitude 2^23 or more is an integer already (so are Inf and
// NaN, returned as they are); below, |x| + 2^23 lands where floats are one
// apart, so the addition rounds to the nearest integer, ties to even (2^23
// is even), and subtracting 2^23 again is exact. The sign is put back, so
// -0.3 gives -0, as nearbyint does.
inline float RoundToNearestEven(float x) {
  const float magnitude = std::fabs(x);
  if (!(magnitude < 0x1p23f)) return x;
  return std::copysign((magnitude + 0x1p23f) - 0x1p23f, x);
}

// The payload value nearest to `weight_units` * 2^fb: a float32 integer
// (round to float32, then to an integer, ties to even), clamped below 2^62.
// REQUIRES: fb in [0, 62] (CodecOptions are checked). Inline and without a
// libm call: the encoders run it on every parameter every step, and as
// std::ldexp and std::nearbyint calls it was a fifth of a dense worker's
// time (perf, 2026-11-26); tests/quanta_codec_test.cc holds it to that
// definition bit for bit.
inline float QuantaPayloadValue(double weight_units, int fraction_bits) {
  // The largest float below 2^62.
  constexpr float kLargest =
      std::bit_cast<float>(std::bit_cast<uint32_t>(static_cast<float>(kMaxPayloadQuanta)) - 1);
  const float scaled =
      RoundToNearestEven(static_cast<float>(weight_units * ExactPowerOfTwo(fraction_bits)));
  if (!(std::fabs(scaled) < kMaxPayloadQuanta)) return std::copysign(kLargest, scaled);
  return scaled;
}

// Dettmers' dynamic tree, 7 magnitude bits (docs/wire-codecs.md 4): code m in
// 1..127 has n = 6 - floor(log2 m) leading zeros (exponent 10^-n), a flag
// bit, and b = 6 - n tree bits k; its magnitude is
//   10^-n * (0.1 + 0.9 * (2k + 1) / 2^(b + 1)) = numerator / denominator
// with integers numerator = 2^(b+1) + 9 (2k + 1) and
// denominator = 10^(n+1) * 2^(b+1). Code 0 is zero. Magnitudes grow with m.
struct DynTreeFraction {
  uint64_t numerator = 0;
  uint64_t denominator = 1;
};
DynTreeFraction DynTreeMagnitude(uint32_t m);
// The magnitude code nearest to `normalized` (>= 0; above 1 gives 127),
// ties to the smaller magnitude. (codec/elementwise.cc, beside the
// encoder's loop, elementwise.h DynTreeEncodeValues, that inlines it.)
uint32_t DynTreeNearestCode(double normalized);
// A code's magnitude in quanta for a tensor scaled by `scale_quanta`
// (0 <= scale_quanta <= 2^52): round(scale * numerator / denominator), half
// up, in exact integer arithmetic.
int64_t DynTreeQuanta(uint32_t m, int64_t scale_quanta);
inline constexpr int64_t kMaxDynTreeScaleQuanta = int64_t{1} << 52;
// The 127 midpoints between consecutive code magnitudes, ascending, as
// doubles: DynTreeNearestCode(x) is how many lie below x (the device's
// encoder searches them: cuda/device_elementwise.h DynTreeCodeBelow).
const double* DynTreeMidpoints();

// Payloads from their parts, for an encoder that computed those parts
// elsewhere (the CUDA backend's kernels: cuda/device_codec.h): the same
// bytes and header fields the host encoders write (Codec::Encode).
// Onebit: `column_values` holds (plus, minus) per column, the layout's
// tensors in order; `signs` (param_count + 7) / 8 bytes, bit i & 7 of byte
// i / 8 set when parameter i's value is >= 0, the padding bits zero.
void FinishOneBitMessage(const TensorLayout& layout, std::span<const float> column_values,
                         std::span<const uint8_t> signs, v1::Update* msg);
// Dyntree8: each tensor's scale (a payload value) and one code per parameter.
void FinishDynTree8Message(const TensorLayout& layout, std::span<const float> scales,
                           std::span<const uint8_t> codes, v1::Update* msg);

// Decodes the payload of a CODEC_ONEBIT, CODEC_DYNTREE8 or CODEC_DENSE_FP32
// message whose header DecodeUpdate has checked (count, CRC): `*quanta`
// gets param_count values. kDataLoss naming the first violation of
// docs/wire-codecs.md, with `*quanta` empty. Allocates only after the payload's
// length has been checked against param_count.
absl::Status DecodeQuantaPayload(const v1::Update& msg, std::vector<int64_t>* quanta);

// Whether the payload of such a message decodes to exactly `quanta`
// (param_count values, either layout: quanta_span.h): OK when it does,
// DecodeQuantaPayload's kDataLoss when it breaks the format, kInternal
// naming the first value that differs. Each codec checks in one walk over
// the payload that compares each value with `quanta` and writes nothing (no
// decoded vector to fill and compare); the dense codec's walk runs on
// parallel_for's threads when it is not null (onebit's and dyntree8's are
// one walk on this thread). A dense message checked against its own
// payload (QuantaSpan::DenseFp32 of it) is the validity walk alone.
absl::Status CheckQuantaPayload(const v1::Update& msg, QuantaSpan quanta,
                                const ParallelFor& parallel_for = nullptr);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_CODEC_H_
