// CODEC_DENSE_FP32 (docs/wire-codecs.md 5): every parameter's delta as a float32
// count of quanta. The baseline: 32 bits per parameter per step.
#include <bit>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"
#include "codec/elementwise.h"

namespace reckon::codec::payload {
namespace {

class DenseFp32 final : public Codec {
 public:
  explicit DenseFp32(const CodecOptions& options) : options_(options) {}
  v1::Codec id() const override { return v1::CODEC_DENSE_FP32; }

  using Codec::Encode;
  absl::Status Encode(std::span<const float> values, v1::Update* msg, std::vector<int64_t>* quanta,
                      const ParallelFor& parallel_for) override {
    // Written in place, four little-endian bytes a value (not appended one
    // value at a time: that was a tenth of the encode).
    std::string* out = msg->mutable_payload();
    out->resize(4 * values.size());
    char* bytes = out->data();
    quanta->resize(values.size());
    int64_t* q = quanta->data();
    const int fraction_bits = options_.fraction_bits;
    auto encode = [&](size_t begin, size_t end) {
      EncodeDenseFp32Values(values.data() + begin, end - begin, fraction_bits, bytes + 4 * begin,
                            q + begin);
    };
    ForChunks(parallel_for, values.size(), encode);
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
