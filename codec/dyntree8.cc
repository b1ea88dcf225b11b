// CODEC_DYNTREE8 (docs/wire-codecs.md 4), Dettmers 2015 section 2: one byte per
// parameter in the 8-bit dynamic tree data type, each tensor scaled by its
// absolute maximum (recomputed every `absmax_every` steps; in between, values
// above a stale maximum clip to the top code and error feedback keeps the
// rest). Decoding is a 128-entry magnitude table per tensor, built in exact
// integer arithmetic from the tensor's scale.
#include <algorithm>
#include <array>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"
#include "codec/elementwise.h"

namespace reckon::codec::payload {
namespace {

std::array<int64_t, 128> MagnitudeTable(int64_t scale_quanta) {
  std::array<int64_t, 128> table{};
  for (uint32_t m = 0; m < 128; ++m) table[m] = DynTreeQuanta(m, scale_quanta);
  return table;
}

class DynTree8 final : public Codec {
 public:
  explicit DynTree8(const CodecOptions& options)
      : options_(options), scales_(options.layout.size(), 0.0f) {}
  v1::Codec id() const override { return v1::CODEC_DYNTREE8; }
  CodecState State() const override { return {steps_, scales_}; }
  absl::Status Restore(const CodecState& state) override {
    if (state == CodecState{}) {  // a fresh codec's (checkpoints from before it was kept)
      steps_ = 0;
      std::fill(scales_.begin(), scales_.end(), 0.0f);
      return absl::OkStatus();
    }
    if (state.scales.size() != scales_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("dyntree8: ", state.scales.size(),
                                                     " scales for ", scales_.size(), " tensors"));
    }
    for (size_t t = 0; t < state.scales.size(); ++t) {
      int64_t scale = 0;
      if (!PayloadValueToQuanta(state.scales[t], &scale) || scale < 0 ||
          scale > kMaxDynTreeScaleQuanta) {
        return absl::InvalidArgumentError(absl::StrCat(
            "dyntree8: scale of tensor ", t, " is not an integral number of quanta in [0, 2^52]"));
      }
    }
    steps_ = state.steps;
    scales_ = state.scales;
    return absl::OkStatus();
  }

  using Codec::Encode;
  absl::Status Encode(std::span<const float> values, v1::Update* msg, std::vector<int64_t>* quanta,
                      const ParallelFor& parallel_for, const QuantaWritten& written) override {
    const bool rescale = steps_++ % options_.absmax_every == 0;
    std::string* out = msg->mutable_payload();
    out->clear();
    PutLayout(options_.layout, out);
    size_t offset = 0;
    for (size_t t = 0; t < options_.layout.size(); ++t) {
      const size_t size = options_.layout[t].size();
      if (rescale) scales_[t] = Scale(values.subspan(offset, size));
      PutF32(out, scales_[t]);
      offset += size;
    }
    const size_t codes_at = out->size();
    out->resize(codes_at + values.size());
    quanta->resize(values.size());
    offset = 0;
    for (size_t t = 0; t < options_.layout.size(); ++t) {
      const size_t size = options_.layout[t].size();
      EncodeTensor(values.subspan(offset, size), static_cast<int64_t>(scales_[t]),
                   out->data() + codes_at + offset, quanta->data() + offset, parallel_for);
      offset += size;
    }
    FinishMessage(id(), values.size(), parallel_for, msg);
    ReportAllWritten(parallel_for, values.size(), written);
    return absl::OkStatus();
  }

 private:
  // The tensor's abs max as a payload value, capped at 2^52 quanta.
  float Scale(std::span<const float> v) const {
    float absmax = 0;
    for (const float x : v) absmax = std::max(absmax, std::fabs(x));
    const float scale = QuantaPayloadValue(absmax, options_.fraction_bits);
    return std::min(scale, static_cast<float>(kMaxDynTreeScaleQuanta));
  }

  // Each value's code on its own: split over parallel_for's threads (when
  // given) as they come.
  void EncodeTensor(std::span<const float> v, int64_t scale_quanta, char* codes, int64_t* quanta,
                    const ParallelFor& parallel_for) const {
    const std::array<int64_t, 128> table = MagnitudeTable(scale_quanta);
    // x * 2^fb / scale: the value as a fraction of the abs max.
    const double to_normalized =
        scale_quanta > 0 ? std::ldexp(1.0, options_.fraction_bits) / double(scale_quanta) : 0.0;
    auto encode = [&](size_t begin, size_t end) {
      DynTreeEncodeValues(v.data() + begin, end - begin, to_normalized, table.data(), codes + begin,
                          quanta + begin);
    };
    ForChunks(parallel_for, v.size(), encode);
  }

  CodecOptions options_;
  std::vector<float> scales_;
  uint64_t steps_ = 0;
};

}  // namespace

std::unique_ptr<Codec> MakeDynTree8(const CodecOptions& options) {
  return std::make_unique<DynTree8>(options);
}

namespace {

// The payload's checks (docs/wire-codecs.md 4), then each value's quanta to
// `sink` in flat order. A code 0x80 found on the way is kDataLoss after
// `sink` has had the values before it.
template <typename Sink>
absl::Status WalkDynTree8(std::string_view bytes, uint64_t param_count, Sink& sink) {
  TensorLayout layout;
  size_t at = 0;
  RECKON_RETURN_IF_ERROR(ParseLayout("dyntree8", bytes, param_count, &layout, &at));
  RECKON_RETURN_IF_ERROR(
      CheckLength("dyntree8", bytes.size(), at + 4 * layout.size() + param_count));
  std::vector<std::array<int64_t, 128>> tables(layout.size());
  for (size_t t = 0; t < layout.size(); ++t, at += 4) {
    int64_t scale = 0;
    if (!PayloadValueToQuanta(GetF32(bytes.data() + at), &scale) || scale < 0 ||
        scale > kMaxDynTreeScaleQuanta) {
      return absl::DataLossError(absl::StrCat("dyntree8: scale of tensor ", t,
                                              " is not an integral number of quanta in [0, 2^52]"));
    }
    tables[t] = MagnitudeTable(scale);
  }
  const uint8_t* codes = reinterpret_cast<const uint8_t*>(bytes.data() + at);
  sink.Begin(param_count);
  uint64_t i = 0;
  for (size_t t = 0; t < layout.size(); ++t) {
    const std::array<int64_t, 128>& table = tables[t];
    for (const uint64_t end = i + layout[t].size(); i < end; ++i) {
      const uint8_t code = codes[i];
      if (code == 0x80) {
        return absl::DataLossError(
            absl::StrCat("dyntree8: code 0x80 (negative zero) at parameter ", i));
      }
      const int64_t magnitude = table[code & 0x7F];
      sink.Put(i, (code & 0x80) ? -magnitude : magnitude);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeDynTree8(std::string_view bytes, uint64_t param_count,
                            std::vector<int64_t>* quanta) {
  QuantaStore store(quanta);
  absl::Status s = WalkDynTree8(bytes, param_count, store);
  if (!s.ok()) quanta->clear();
  return s;
}

absl::Status CheckDynTree8(std::string_view bytes, std::span<const int64_t> quanta) {
  QuantaCompare compare(quanta);
  RECKON_RETURN_IF_ERROR(WalkDynTree8(bytes, quanta.size(), compare));
  return compare.Result("dyntree8");
}

}  // namespace reckon::codec::payload
