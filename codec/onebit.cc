// CODEC_ONEBIT (docs/wire-codecs.md 3), Seide et al. 2014 section 3: every
// parameter's sign (quantization threshold 0) and, per weight-matrix column,
// the two reconstruction values that minimize the squared error: the means
// of the column's non-negative and of its negative values. Error feedback
// (EncodeWithFeedback) carries the quantization error to the next step.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"

namespace reckon::codec::payload {
namespace {

class OneBit final : public Codec {
 public:
  explicit OneBit(const CodecOptions& options) : options_(options) {}
  v1::Codec id() const override { return v1::CODEC_ONEBIT; }

  using Codec::Encode;
  // One thread: its reconstruction values are column statistics
  // (parallel_for unused).
  absl::Status Encode(std::span<const float> values, v1::Update* msg, std::vector<int64_t>* quanta,
                      const ParallelFor& /*parallel_for*/) override {
    std::string* out = msg->mutable_payload();
    out->clear();
    PutLayout(options_.layout, out);
    quanta->resize(values.size());
    size_t offset = 0;
    for (const TensorShape& t : options_.layout) {
      EncodeTensor(t, values.subspan(offset, t.size()), out,
                   std::span<int64_t>(*quanta).subspan(offset, t.size()));
      offset += t.size();
    }
    // The signs, LSB first in flat order; the padding bits stay zero.
    const size_t bits_at = out->size();
    out->resize(bits_at + (values.size() + 7) / 8, '\0');
    char* bits = out->data() + bits_at;
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i >> 3] = static_cast<char>(bits[i >> 3] | ((values[i] >= 0.0f) << (i & 7)));
    }
    FinishMessage(id(), values.size(), msg);
    return absl::OkStatus();
  }

 private:
  // Appends the tensor's (plus, minus) per column and writes its quanta.
  void EncodeTensor(const TensorShape& t, std::span<const float> v, std::string* out,
                    std::span<int64_t> quanta) {
    sum_pos_.assign(t.cols, 0.0);
    sum_neg_.assign(t.cols, 0.0);
    count_pos_.assign(t.cols, 0);
    for (uint32_t r = 0; r < t.rows; ++r) {
      const float* row = v.data() + size_t{r} * t.cols;
      for (uint32_t c = 0; c < t.cols; ++c) {
        const bool pos = row[c] >= 0.0f;
        (pos ? sum_pos_ : sum_neg_)[c] += row[c];
        count_pos_[c] += pos;
      }
    }
    plus_.resize(t.cols);
    minus_.resize(t.cols);
    for (uint32_t c = 0; c < t.cols; ++c) {
      const uint32_t neg = t.rows - count_pos_[c];
      const float plus =
          count_pos_[c] ? QuantaPayloadValue(sum_pos_[c] / count_pos_[c], options_.fraction_bits)
                        : 0.0f;
      const float minus =
          neg ? QuantaPayloadValue(sum_neg_[c] / neg, options_.fraction_bits) : 0.0f;
      PutF32(out, plus);
      PutF32(out, minus);
      plus_[c] = static_cast<int64_t>(plus);
      minus_[c] = static_cast<int64_t>(minus);
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const size_t c = i % t.cols;
      quanta[i] = v[i] >= 0.0f ? plus_[c] : minus_[c];
    }
  }

  CodecOptions options_;
  std::vector<double> sum_pos_, sum_neg_;
  std::vector<uint32_t> count_pos_;
  std::vector<int64_t> plus_, minus_;
};

}  // namespace

std::unique_ptr<Codec> MakeOneBit(const CodecOptions& options) {
  return std::make_unique<OneBit>(options);
}

absl::Status DecodeOneBit(std::string_view bytes, uint64_t param_count,
                          std::vector<int64_t>* quanta) {
  TensorLayout layout;
  size_t at = 0;
  RECKON_RETURN_IF_ERROR(ParseLayout("onebit", bytes, param_count, &layout, &at));
  uint64_t columns = 0;
  for (const TensorShape& t : layout) columns += t.cols;
  RECKON_RETURN_IF_ERROR(
      CheckLength("onebit", bytes.size(), at + 8 * columns + (param_count + 7) / 8));
  std::vector<int64_t> plus(columns), minus(columns);
  for (uint64_t c = 0; c < columns; ++c, at += 8) {
    if (!PayloadValueToQuanta(GetF32(bytes.data() + at), &plus[c]) ||
        !PayloadValueToQuanta(GetF32(bytes.data() + at + 4), &minus[c])) {
      return absl::DataLossError(absl::StrCat("onebit: reconstruction values of column ", c,
                                              " are not integral numbers of quanta below 2^62"));
    }
  }
  const uint8_t* bits = reinterpret_cast<const uint8_t*>(bytes.data() + at);
  if (param_count % 8 != 0 && (bits[param_count / 8] >> (param_count % 8)) != 0) {
    return absl::DataLossError("onebit: padding bits after the last sign are not zero");
  }
  quanta->resize(param_count);
  uint64_t i = 0, column_base = 0;
  for (const TensorShape& t : layout) {
    for (uint64_t e = 0; e < t.size(); ++e, ++i) {
      const uint64_t c = column_base + e % t.cols;
      (*quanta)[i] = ((bits[i >> 3] >> (i & 7)) & 1) ? plus[c] : minus[c];
    }
    column_base += t.cols;
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec::payload
