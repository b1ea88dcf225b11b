// CODEC_DENSE_FP32 (docs/wire-codecs.md 5): every parameter's delta as a float32
// count of quanta. The baseline: 32 bits per parameter per step.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"
#include "codec/crc32c.h"
#include "codec/elementwise.h"

namespace reckon::codec::payload {
namespace {

// A block of values into its payload bytes, and the payload's CRC-32C
// continued from `crc` over them while they are in the L1 cache: the dense
// encoder's body, in its own pass (DenseFp32::Encode) and in its caller's
// (DenseFeedbackPass).
uint32_t EncodeDenseBlock(const float* values, size_t len, int fraction_bits, char* bytes,
                          uint32_t crc) {
  EncodeDenseFp32Values(values, len, fraction_bits, bytes);
  return Crc32c(bytes, 4 * len, crc);
}

class DenseFp32 final : public Codec {
 public:
  explicit DenseFp32(const CodecOptions& options) : options_(options) {}
  v1::Codec id() const override { return v1::CODEC_DENSE_FP32; }

  using Codec::Encode;
  absl::Status Encode(std::span<const float> values, v1::Update* msg, std::vector<int64_t>* quanta,
                      const ParallelFor& parallel_for, const QuantaWritten& written) override {
    // Written in place, four little-endian bytes a value (not appended one
    // value at a time: that was a tenth of the encode). The payload is the
    // decoded form too (quanta_span.h): no int64 quanta are written.
    std::string* out = msg->mutable_payload();
    out->resize(4 * values.size());
    char* bytes = out->data();
    quanta->clear();
    const int fraction_bits = options_.fraction_bits;
    // Block by block, each reported written at once (the feedback then
    // reads the block's values and payload from the L1 cache), and its CRC
    // continued from there too: no pass of its own over the payload.
    Crc32cPieces pieces;
    auto encode = [&](size_t begin, size_t end) {
      uint32_t crc = 0;
      for (size_t block = begin; block < end; block += kCacheBlockValues) {
        const size_t len = std::min(kCacheBlockValues, end - block);
        crc = EncodeDenseBlock(values.data() + block, len, fraction_bits, bytes + 4 * block, crc);
        if (written) written(block, block + len);
      }
      pieces.Add(4 * begin, 4 * end, crc);
    };
    ForChunks(parallel_for, values.size(), encode);
    uint32_t crc;
    if (!pieces.Combine(out->size(), &crc)) crc = Crc32c(*out);
    FinishMessageWithCrc(id(), values.size(), crc, msg);
    return absl::OkStatus();
  }

 private:
  CodecOptions options_;
};

}  // namespace

std::unique_ptr<Codec> MakeDenseFp32(const CodecOptions& options) {
  return std::make_unique<DenseFp32>(options);
}

namespace {

// Where a pass over the whole payload failed, the value that failed, found
// again one at a time: kDataLoss for a value that is not a payload value,
// else each value to `sink` (QuantaCompare names one that differs).
template <typename Sink>
absl::Status WalkDenseFp32OneByOne(std::string_view bytes, Sink& sink) {
  const uint64_t n = bytes.size() / 4;
  for (uint64_t i = 0; i < n; ++i) {
    const float v = GetF32(bytes.data() + 4 * i);
    int64_t q;
    if (!PayloadValueToQuanta(v, &q)) {
      return absl::DataLossError(absl::StrCat("dense fp32: value ", i, " is ", v,
                                              ", not an integral number of quanta below 2^62"));
    }
    sink.Put(i, q);
  }
  return absl::OkStatus();
}

struct NoSink {
  void Put(uint64_t, int64_t) {}
};

}  // namespace

absl::Status DecodeDenseFp32(std::string_view bytes, uint64_t param_count,
                             std::vector<int64_t>* quanta) {
  RECKON_RETURN_IF_ERROR(CheckLength("dense fp32", bytes.size(), 4 * param_count));
  quanta->resize(param_count);
  // One pass with no call per value, vectorized where the CPU has AVX-512
  // (elementwise.h): the same decodes took 7,061 samples through
  // PayloadValueToQuanta (std::trunc is a libm call on x86-64 before
  // SSE4.1), 3,030 branch-free and 1,901 on AVX-512 (`perf record` of a
  // dense worker decoding its own messages). The value that failed is found
  // again only when one did.
  if (DecodeDenseFp32Values(bytes.data(), param_count, quanta->data())) return absl::OkStatus();
  quanta->clear();
  NoSink none;
  RECKON_RETURN_IF_ERROR(WalkDenseFp32OneByOne(bytes, none));
  return absl::InternalError("dense fp32: a value failed one check and passed the other");
}

absl::Status CheckPayloadCrc(uint32_t computed, uint32_t header) {
  if (computed == header) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat("CRC-32C mismatch: payload has ", absl::Hex(computed),
                                          ", header says ", absl::Hex(header)));
}

absl::Status CheckDenseFp32Payload(std::string_view bytes, uint32_t crc,
                                   const DenseFp32BlockSink& sink,
                                   const ParallelFor& parallel_for) {
  const size_t n = bytes.size() / 4;
  Crc32cPieces pieces;
  std::atomic<bool> all_valid{true};
  // The value ranges taken, one a chunk that took any (a few).
  absl::Mutex taken_mu;
  std::vector<std::pair<size_t, size_t>> taken;
  ForChunks(parallel_for, n, [&](size_t begin, size_t end) {
    uint32_t chunk_crc = 0;
    bool valid = true;
    size_t taken_end = begin;
    for (size_t block = begin; block < end; block += kCacheBlockValues) {
      const char* at = bytes.data() + 4 * block;
      const size_t len = std::min(kCacheBlockValues, end - block);
      chunk_crc = Crc32c(at, 4 * len, chunk_crc);
      if (!valid) continue;  // the CRC still covers the rest
      valid = DenseFp32ValuesValid(at, len);
      if (valid && sink.take) {
        sink.take(block, len, at);
        taken_end = block + len;
      }
    }
    pieces.Add(4 * begin, 4 * end, chunk_crc);
    if (taken_end > begin && sink.give_back) {
      absl::MutexLock lock(&taken_mu);
      taken.emplace_back(begin, taken_end);
    }
    if (!valid) all_valid.store(false, std::memory_order_relaxed);
  });
  // Every chunk has returned: `taken` is this thread's alone now.
  const auto give_back_everything = [&] {
    for (const auto& [first, end] : taken) sink.give_back(first, end - first);
  };
  uint32_t computed = 0;
  // A ParallelFor that broke its contract (a gap, an overlap, a range left
  // out): what it took given back (the replica's sums are exact modulo
  // 2^64 in any order, so an overlap taken twice is undone twice), and the
  // whole pass again on this thread, not what its chunks happened to cover.
  if (!pieces.Combine(4 * n, &computed)) {
    give_back_everything();
    return CheckDenseFp32Payload(bytes, crc, sink, nullptr);
  }
  // A tail of fewer than 4 bytes (a payload of the wrong length, which
  // its caller refuses anyway) is in the CRC as the receivers compute it.
  computed = Crc32c(bytes.data() + 4 * n, bytes.size() - 4 * n, computed);
  absl::Status status = CheckPayloadCrc(computed, crc);
  if (status.ok() && !all_valid.load(std::memory_order_relaxed)) {
    status = DenseFp32ValueError(bytes);
    if (status.ok()) {
      status = absl::InternalError("dense fp32: a value failed one check and passed the other");
    }
  }
  if (!status.ok()) give_back_everything();
  return status;
}

absl::Status DenseFp32ValueError(std::string_view bytes) {
  NoSink none;
  return WalkDenseFp32OneByOne(bytes, none);
}

absl::Status CheckDenseFp32(std::string_view bytes, QuantaSpan expected,
                            const ParallelFor& parallel_for) {
  RECKON_RETURN_IF_ERROR(CheckLength("dense fp32", bytes.size(), 4 * expected.size()));
  // Each chunk on its thread (the publisher's self-check, every step);
  // where one differs, the whole payload walked again one value at a time
  // for the error's words.
  std::atomic<bool> all_equal{true};
  ForChunks(parallel_for, expected.size(), [&](size_t begin, size_t end) {
    const char* payload = bytes.data() + 4 * begin;
    const bool equal =
        expected.is_dense_fp32()
            ? DenseFp32PayloadsEqual(payload, expected.dense_fp32_bytes() + 4 * begin, end - begin)
            : DenseFp32ValuesEqual(payload, expected.int64s() + begin, end - begin);
    if (!equal) all_equal.store(false, std::memory_order_relaxed);
  });
  if (all_equal.load(std::memory_order_relaxed)) return absl::OkStatus();
  NoSink none;
  RECKON_RETURN_IF_ERROR(WalkDenseFp32OneByOne(bytes, none));  // names a value that is not one
  const std::vector<int64_t> expected_quanta = expected.ToVector();
  QuantaCompare compare(expected_quanta);
  RECKON_RETURN_IF_ERROR(WalkDenseFp32OneByOne(bytes, compare));
  RECKON_RETURN_IF_ERROR(compare.Result("dense fp32"));
  return absl::InternalError("dense fp32: a value failed one check and passed the other");
}

}  // namespace reckon::codec::payload

namespace reckon::codec {

bool DenseFeedbackPass::UsableFor(const CodecOptions& options) {
  return options.codec == v1::CODEC_DENSE_FP32 && options.error_feedback;
}

DenseFeedbackPass::DenseFeedbackPass(const CodecOptions& options, std::span<float> residual,
                                     v1::Update* msg)
    : options_(options),
      residual_(residual),
      msg_(msg),
      payload_((msg->mutable_payload()->resize(4 * residual.size()),
                msg->mutable_payload()->data())),
      limit_bits_(ResidualLimitBits(options.fraction_bits)) {}

void DenseFeedbackPass::Chunk::Encode(size_t len, uint32_t block_bound) {
  if (stopped_ || block_bound >= static_cast<uint32_t>(pass_.limit_bits_)) {
    stopped_ = true;
    return;
  }
  float* r = pass_.residual_.data() + next_;
  char* bytes = pass_.payload_ + 4 * next_;
  const int fraction_bits = pass_.options_.fraction_bits;
  crc_ = payload::EncodeDenseBlock(r, len, fraction_bits, bytes, crc_);
  SubtractDenseFp32(r, bytes, len, fraction_bits);  // EncodeWithFeedback's feedback
  next_ += len;
}

DenseFeedbackPass::Chunk::~Chunk() {
  if (next_ == begin_) return;
  absl::MutexLock lock(&pass_.mu_);
  pass_.encoded_.push_back({begin_, next_, crc_});
}

absl::Status DenseFeedbackPass::Finish(std::vector<int64_t>* quanta,
                                       const ParallelFor& parallel_for) {
  quanta->clear();
  const size_t n = residual_.size();
  absl::MutexLock lock(&mu_);  // every chunk is done: uncontended
  Crc32cPieces pieces;
  for (const Encoded& e : encoded_) pieces.Add(4 * e.begin, 4 * e.end, e.crc);
  uint32_t crc = 0;
  if (pieces.Combine(4 * n, &crc)) {
    payload::FinishMessageWithCrc(v1::CODEC_DENSE_FP32, n, crc, msg_);
    return absl::OkStatus();
  }
  // Never on a trained step's path: each value's feedback undone, one
  // value at a time. The encoder's value v is the nearest integer to
  // s = r * 2^fb (a power of two: exact), so d = v * 2^-fb (exact) lies
  // within a factor of two of r when v is not 0, and r' = r - d was
  // exact (Sterbenz): r' + d is r, exactly. A v of ±0 subtracted +0
  // (SubtractDenseFp32), which left every r as it was, -0 too.
  const float scale = std::ldexp(1.0f, -options_.fraction_bits);
  for (const Encoded& e : encoded_) {
    for (size_t i = e.begin; i < e.end; ++i) {
      float v;
      std::memcpy(&v, payload_ + 4 * i, 4);
      if (v != 0) residual_[i] += v * scale;
    }
  }
  encoded_.clear();
  msg_->Clear();
  absl::StatusOr<std::unique_ptr<Codec>> codec = MakeCodec(options_);
  if (!codec.ok()) return codec.status();
  return EncodeWithFeedback(**codec, options_, residual_, msg_, quanta, parallel_for);
}

}  // namespace reckon::codec
