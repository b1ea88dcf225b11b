// CODEC_DENSE_FP32 (docs/codecs.md 5): every parameter's delta as a float32
// count of quanta. The baseline: 32 bits per parameter per step.
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"

namespace reckon::codec::payload {
namespace {

class DenseFp32 final : public Codec {
 public:
  explicit DenseFp32(const CodecOptions& options) : options_(options) {}
  v1::Codec id() const override { return v1::CODEC_DENSE_FP32; }

  absl::Status Encode(std::span<const float> values, v1::Update* msg,
                      std::vector<int64_t>* quanta) override {
    std::string* out = msg->mutable_payload();
    out->clear();
    out->reserve(4 * values.size());
    quanta->resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      const float v = QuantaPayloadValue(values[i], options_.fraction_bits);
      PutF32(out, v);
      (*quanta)[i] = static_cast<int64_t>(v);
    }
    FinishMessage(id(), values.size(), msg);
    return absl::OkStatus();
  }

 private:
  CodecOptions options_;
};

}  // namespace

std::unique_ptr<Codec> MakeDenseFp32(const CodecOptions& options) {
  return std::make_unique<DenseFp32>(options);
}

absl::Status DecodeDenseFp32(std::string_view bytes, uint64_t param_count,
                             std::vector<int64_t>* quanta) {
  RECKON_RETURN_IF_ERROR(CheckLength("dense fp32", bytes.size(), 4 * param_count));
  quanta->resize(param_count);
  for (uint64_t i = 0; i < param_count; ++i) {
    const float v = GetF32(bytes.data() + 4 * i);
    if (!PayloadValueToQuanta(v, &(*quanta)[i])) {
      quanta->clear();
      return absl::DataLossError(absl::StrCat("dense fp32: value ", i, " is ", v,
                                              ", not an integral number of quanta below 2^62"));
    }
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec::payload
