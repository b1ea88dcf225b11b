#include "codec/codec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <limits>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"
#include "codec/crc32c.h"
#include "codec/elementwise.h"
#include "codec/update_words.h"

namespace reckon::codec {

uint64_t LayoutParamCount(const TensorLayout& layout) {
  uint64_t n = 0;
  for (const TensorShape& t : layout) n += t.size();
  return n;
}

std::string CodecFlagName(v1::Codec codec) {
  switch (codec) {
    case v1::CODEC_THRESHOLD_PACKED32:
    case v1::CODEC_THRESHOLD_RICE:
      return "threshold";
    case v1::CODEC_ONEBIT:
      return "onebit";
    case v1::CODEC_DYNTREE8:
      return "dyntree8";
    case v1::CODEC_DENSE_FP32:
      return "dense";
    default:
      return absl::StrCat("codec", static_cast<int>(codec));
  }
}

std::string WireCodecLabel(v1::Codec codec) {
  if (codec == v1::CODEC_THRESHOLD_RICE) return "rice";
  if (codec == v1::CODEC_THRESHOLD_PACKED32) return "packed32";
  return CodecFlagName(codec);
}

absl::StatusOr<v1::Codec> CodecFromFlagName(const std::string& name) {
  if (name == "threshold") return v1::CODEC_THRESHOLD_RICE;
  if (name == "onebit") return v1::CODEC_ONEBIT;
  if (name == "dyntree8") return v1::CODEC_DYNTREE8;
  if (name == "dense") return v1::CODEC_DENSE_FP32;
  return absl::InvalidArgumentError(
      absl::StrCat("--codec '", name, "' is not threshold, onebit, dyntree8 or dense"));
}

absl::StatusOr<std::unique_ptr<Codec>> MakeCodec(const CodecOptions& options) {
  if (options.fraction_bits < 0 || options.fraction_bits > 62) {
    return absl::InvalidArgumentError(
        absl::StrCat("fraction bits ", options.fraction_bits, " outside [0, 62]"));
  }
  if (options.absmax_every < 1) {
    return absl::InvalidArgumentError("--absmax-every must be >= 1");
  }
  if (options.layout.empty()) return absl::InvalidArgumentError("the codec needs a tensor layout");
  for (const TensorShape& t : options.layout) {
    if (t.rows == 0 || t.cols == 0) {
      return absl::InvalidArgumentError("every tensor of the layout needs rows and columns");
    }
  }
  if (LayoutParamCount(options.layout) > kMaxParamCount) {
    return absl::InvalidArgumentError("the layout holds more than 2^31 parameters");
  }
  switch (options.codec) {
    case v1::CODEC_DENSE_FP32:
      return payload::MakeDenseFp32(options);
    case v1::CODEC_ONEBIT:
      return payload::MakeOneBit(options);
    case v1::CODEC_DYNTREE8:
      return payload::MakeDynTree8(options);
    default:
      return absl::InvalidArgumentError(absl::StrCat("codec ", v1::Codec_Name(options.codec),
                                                     " is not a quanta codec (codec/codec.h)"));
  }
}

absl::Status EncodeWithFeedback(Codec& codec, const CodecOptions& options,
                                std::span<float> residual, v1::Update* msg,
                                std::vector<int64_t>* quanta, const ParallelFor& parallel_for,
                                uint32_t residual_bound) {
  // |r| * 2^fb < 2^62 for every element, compared on the float bits: NaN
  // and Inf sit above every finite limit, so one integer compare catches all.
  const int32_t limit_bits = ResidualLimitBits(options.fraction_bits);
  std::atomic<int32_t> any_bad{0};
  const bool bounded = residual_bound < static_cast<uint32_t>(limit_bits);
  if (!bounded) {
    ForChunks(parallel_for, residual.size(), [&](size_t begin, size_t end) {
      int32_t bad = 0;
      for (size_t i = begin; i < end; ++i) {
        bad |=
            static_cast<int32_t>((std::bit_cast<int32_t>(residual[i]) & 0x7FFFFFFF) >= limit_bits);
      }
      if (bad) any_bad.store(1, std::memory_order_relaxed);
    });
  }
  if (any_bad.load(std::memory_order_relaxed)) {
    for (size_t i = 0; i < residual.size(); ++i) {
      if ((std::bit_cast<int32_t>(residual[i]) & 0x7FFFFFFF) >= limit_bits) {
        quanta->clear();
        return absl::InvalidArgumentError(
            absl::StrCat("residual element ", i, " is ", residual[i],
                         "; nothing was emitted (diverged training? lower the learning rate)"));
      }
    }
  }
  // The feedback as the encoder finishes each range (Codec::QuantaWritten):
  // a dense block's residual and payload are still in the cache then. The
  // dense codec's quanta are its payload's values (EmittedQuanta), read
  // where it wrote them.
  const double quantum = std::ldexp(1.0, -options.fraction_bits);
  float* r = residual.data();
  const bool feedback = options.error_feedback;
  const bool from_payload = codec.id() == v1::CODEC_DENSE_FP32;
  auto feed_back = [&](size_t begin, size_t end) {
    if (feedback && from_payload) {
      SubtractDenseFp32(r + begin, msg->payload().data() + 4 * begin, end - begin,
                        options.fraction_bits);
    } else if (feedback) {
      SubtractQuanta(r + begin, quanta->data() + begin, end - begin, quantum);
    } else {
      std::fill(r + begin, r + end, 0.0f);
    }
  };
  if (absl::Status s = codec.Encode(residual, msg, quanta, parallel_for, feed_back); !s.ok()) {
    quanta->clear();
    return s;
  }
  return absl::OkStatus();
}

bool PayloadValueToQuanta(float v, int64_t* quanta) {
  if (!std::isfinite(v) || std::trunc(v) != v || !(std::fabs(v) < kMaxPayloadQuanta)) return false;
  *quanta = static_cast<int64_t>(v);
  return true;
}

DynTreeFraction DynTreeMagnitude(uint32_t m) {
  if (m == 0 || m > 127) return {0, 1};
  const int top = std::bit_width(m) - 1;                 // position of the flag bit, 0..6
  const int n = 6 - top;                                 // leading zeros: exponent 10^-n
  const uint64_t k = m - (uint32_t{1} << top);           // the `top` tree bits
  const uint64_t intervals2 = uint64_t{1} << (top + 1);  // 2^(b+1)
  uint64_t pow10 = 10;
  for (int i = 0; i < n; ++i) pow10 *= 10;  // 10^(n+1)
  return {intervals2 + 9 * (2 * k + 1), pow10 * intervals2};
}

absl::Status Codec::Restore(const CodecState& state) {
  if (state == CodecState{}) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("codec ", CodecFlagName(id()),
                                                 " keeps no state between steps, given ",
                                                 state.scales.size(), " scales"));
}

namespace {

// The layout header, `values` as little-endian float32s, then `bytes`:
// how both host encoders lay out their payloads (codec/onebit.cc,
// codec/dyntree8.cc; docs/wire-codecs.md 3-4).
void FinishFromParts(v1::Codec codec, const TensorLayout& layout, std::span<const float> values,
                     std::span<const uint8_t> bytes, v1::Update* msg) {
  std::string* out = msg->mutable_payload();
  out->clear();
  payload::PutLayout(layout, out);
  for (const float v : values) payload::PutF32(out, v);
  out->append(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  payload::FinishMessage(codec, LayoutParamCount(layout), /*parallel_for=*/nullptr, msg);
}

}  // namespace

void FinishOneBitMessage(const TensorLayout& layout, std::span<const float> column_values,
                         std::span<const uint8_t> signs, v1::Update* msg) {
  FinishFromParts(v1::CODEC_ONEBIT, layout, column_values, signs, msg);
}

void FinishDynTree8Message(const TensorLayout& layout, std::span<const float> scales,
                           std::span<const uint8_t> codes, v1::Update* msg) {
  FinishFromParts(v1::CODEC_DYNTREE8, layout, scales, codes, msg);
}

int64_t DynTreeQuanta(uint32_t m, int64_t scale_quanta) {
  const DynTreeFraction f = DynTreeMagnitude(m);
  // 2 * 2^52 * 1271 + 2e7 < 2^64: no overflow for any valid scale.
  const uint64_t s = static_cast<uint64_t>(scale_quanta);
  return static_cast<int64_t>((2 * s * f.numerator + f.denominator) / (2 * f.denominator));
}

absl::Status DecodeQuantaPayload(const v1::Update& msg, std::vector<int64_t>* quanta) {
  quanta->clear();
  absl::Status s;
  switch (msg.codec()) {
    case v1::CODEC_DENSE_FP32:
      s = payload::DecodeDenseFp32(msg.payload(), msg.param_count(), quanta);
      break;
    case v1::CODEC_ONEBIT:
      s = payload::DecodeOneBit(msg.payload(), msg.param_count(), quanta);
      break;
    case v1::CODEC_DYNTREE8:
      s = payload::DecodeDynTree8(msg.payload(), msg.param_count(), quanta);
      break;
    default:
      s = absl::DataLossError(absl::StrCat("codec ", msg.codec(), " is not a quanta codec"));
  }
  if (!s.ok()) quanta->clear();
  return s;
}

absl::Status CheckQuantaPayload(const v1::Update& msg, QuantaSpan quanta,
                                const ParallelFor& parallel_for) {
  if (msg.param_count() != quanta.size()) {
    return absl::InternalError(
        absl::StrCat("param_count ", msg.param_count(), " for ", quanta.size(), " values"));
  }
  switch (msg.codec()) {
    case v1::CODEC_DENSE_FP32:
      return payload::CheckDenseFp32(msg.payload(), quanta, parallel_for);
    case v1::CODEC_ONEBIT:
    case v1::CODEC_DYNTREE8:
      break;
    default:
      return absl::DataLossError(absl::StrCat("codec ", msg.codec(), " is not a quanta codec"));
  }
  // Their walks compare with int64 quanta (their encoders write them).
  std::vector<int64_t> converted;
  if (quanta.is_dense_fp32()) converted = quanta.ToVector();
  const std::span<const int64_t> expected =
      quanta.is_dense_fp32() ? std::span<const int64_t>(converted)
                             : std::span<const int64_t>(quanta.int64s(), quanta.size());
  return msg.codec() == v1::CODEC_ONEBIT ? payload::CheckOneBit(msg.payload(), expected)
                                         : payload::CheckDynTree8(msg.payload(), expected);
}

namespace payload {

absl::Status QuantaCompare::Result(const char* codec) const {
  if (first_ == kNone) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(codec, ": value ", first_, " decodes to ", got_,
                                          " quanta, not the ", expected_[first_], " encoded"));
}

void PutLayout(const TensorLayout& layout, std::string* out) {
  PutU32(out, static_cast<uint32_t>(layout.size()));
  for (const TensorShape& t : layout) {
    PutU32(out, t.rows);
    PutU32(out, t.cols);
  }
}

absl::Status ParseLayout(std::string_view codec, std::string_view bytes, uint64_t param_count,
                         TensorLayout* layout, size_t* consumed) {
  layout->clear();
  const std::string name(codec);
  if (bytes.size() < 4) {
    return absl::DataLossError(
        absl::StrCat(name, ": payload of ", bytes.size(), " bytes ends before the tensor count"));
  }
  const uint32_t tensors = GetU32(bytes.data());
  if (tensors == 0) return absl::DataLossError(absl::StrCat(name, ": tensor count is 0"));
  if (tensors > (bytes.size() - 4) / 8) {
    return absl::DataLossError(absl::StrCat(name, ": tensor count ", tensors, " does not fit in a ",
                                            bytes.size(), "-byte payload"));
  }
  layout->resize(tensors);
  uint64_t total = 0;
  for (uint32_t t = 0; t < tensors; ++t) {
    const char* p = bytes.data() + 4 + 8 * size_t{t};
    TensorShape& shape = (*layout)[t];
    shape = {GetU32(p), GetU32(p + 4)};
    if (shape.rows == 0 || shape.cols == 0) {
      layout->clear();
      return absl::DataLossError(
          absl::StrCat(name, ": tensor ", t, " is ", shape.rows, " x ", shape.cols));
    }
    total += shape.size();  // each term < 2^64 / 2^32 tensors: no overflow
    if (total > param_count) {
      layout->clear();
      return absl::DataLossError(absl::StrCat(name, ": tensors 0..", t, " hold ", total,
                                              " parameters, above param_count ", param_count));
    }
  }
  if (total != param_count) {
    layout->clear();
    return absl::DataLossError(
        absl::StrCat(name, ": tensors hold ", total, " parameters, param_count is ", param_count));
  }
  *consumed = 4 + 8 * size_t{tensors};
  return absl::OkStatus();
}

absl::Status CheckLength(std::string_view what, size_t actual, uint64_t expected) {
  if (actual == expected) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat(std::string(what), ": payload is ", actual, " bytes, expected ", expected));
}

void FinishMessage(v1::Codec codec, uint64_t param_count, const ParallelFor& parallel_for,
                   v1::Update* msg) {
  FinishMessageWithCrc(codec, param_count, Crc32cOnThreads(msg->payload(), parallel_for), msg);
}

void FinishMessageWithCrc(v1::Codec codec, uint64_t param_count, uint32_t crc, v1::Update* msg) {
  msg->set_codec(codec);
  msg->set_param_count(param_count);
  msg->set_count(static_cast<uint32_t>(param_count));
  msg->set_step_quanta(0);
  msg->set_rice_k(0);
  msg->set_crc32c(crc);
}

void ReportAllWritten(const ParallelFor& parallel_for, size_t n,
                      const Codec::QuantaWritten& written) {
  if (written) ForChunks(parallel_for, n, written);
}

}  // namespace payload
}  // namespace reckon::codec
