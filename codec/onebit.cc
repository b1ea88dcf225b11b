// CODEC_ONEBIT (docs/wire-codecs.md 3), Seide et al. 2014 section 3: every
// parameter's sign (quantization threshold 0) and, per weight-matrix column,
// the two reconstruction values that minimize the squared error: the means
// of the column's non-negative and of its negative values. Error feedback
// (EncodeWithFeedback) carries the quantization error to the next step.
#include <algorithm>
#include <bit>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/codec_payload.h"

namespace reckon::codec::payload {
namespace {

// `plus` where `bit` is 1, else `minus`, without a branch: the signs are
// random to the branch predictor, and a branch per value mispredicted half
// of them (most of the decode's time).
inline int64_t SelectQuanta(uint32_t bit, int64_t plus, int64_t minus) {
  const int64_t mask = -static_cast<int64_t>(bit);
  return minus ^ ((plus ^ minus) & mask);
}

class OneBit final : public Codec {
 public:
  explicit OneBit(const CodecOptions& options) : options_(options) {}
  v1::Codec id() const override { return v1::CODEC_ONEBIT; }

  using Codec::Encode;
  // On parallel_for's threads (when given): a tensor's column sums split by
  // columns (each column still summed in row order: the same bits on any
  // number of threads), its quanta by rows, the signs by bytes.
  absl::Status Encode(std::span<const float> values, v1::Update* msg, std::vector<int64_t>* quanta,
                      const ParallelFor& parallel_for, const QuantaWritten& written) override {
    std::string* out = msg->mutable_payload();
    out->clear();
    PutLayout(options_.layout, out);
    quanta->resize(values.size());
    size_t offset = 0;
    for (const TensorShape& t : options_.layout) {
      EncodeTensor(t, values.subspan(offset, t.size()), out,
                   std::span<int64_t>(*quanta).subspan(offset, t.size()), parallel_for);
      offset += t.size();
    }
    // The signs, LSB first in flat order; the padding bits stay zero. A
    // byte at a time (a read-modify-write of the byte per value was a tenth
    // of the encode).
    const size_t bits_at = out->size();
    const size_t n = values.size();
    out->resize(bits_at + (n + 7) / 8, '\0');
    char* bits = out->data() + bits_at;
    ForChunks(parallel_for, n / 8, [&](size_t begin, size_t end) {
      for (size_t byte = begin; byte < end; ++byte) {
        const float* v = values.data() + 8 * byte;
        unsigned packed = 0;
        for (int b = 0; b < 8; ++b) packed |= unsigned(v[b] >= 0.0f) << b;
        bits[byte] = static_cast<char>(packed);
      }
    });
    unsigned last = 0;
    for (size_t i = n - n % 8; i < n; ++i) last |= unsigned(values[i] >= 0.0f) << (i % 8);
    if (n % 8 != 0) bits[n / 8] = static_cast<char>(last);
    FinishMessage(id(), values.size(), parallel_for, msg);
    ReportAllWritten(parallel_for, values.size(), written);
    return absl::OkStatus();
  }

 private:
  // Appends the tensor's (plus, minus) per column and writes its quanta.
  void EncodeTensor(const TensorShape& t, std::span<const float> v, std::string* out,
                    std::span<int64_t> quanta, const ParallelFor& parallel_for) {
    sum_pos_.assign(t.cols, 0.0);
    sum_neg_.assign(t.cols, 0.0);
    count_pos_.assign(t.cols, 0);
    // Each column's sums in row order. Branch-free (the signs are a coin
    // toss for the branch predictor): each value goes to both sums, masked
    // to +0 in the one it does not belong to, which changes no bit of that
    // sum (+0 or nonzero all along: a -0 value is non-negative).
    double* sum_pos = sum_pos_.data();
    double* sum_neg = sum_neg_.data();
    uint32_t* count_pos = count_pos_.data();
    ForChunks(parallel_for, t.cols, [&](size_t first, size_t last) {
      for (uint32_t r = 0; r < t.rows; ++r) {
        const float* row = v.data() + size_t{r} * t.cols;
        for (size_t c = first; c < last; ++c) {
          const uint64_t x = std::bit_cast<uint64_t>(static_cast<double>(row[c]));
          const uint32_t pos = row[c] >= 0.0f;
          const uint64_t pos_mask = 0 - uint64_t{pos};
          sum_pos[c] += std::bit_cast<double>(x & pos_mask);
          sum_neg[c] += std::bit_cast<double>(x & ~pos_mask);
          count_pos[c] += pos;
        }
      }
    });
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
    // By row and column (a division per value, i % cols, was most of the
    // encode), branch-free.
    const int64_t* plus = plus_.data();
    const int64_t* minus = minus_.data();
    ForChunks(parallel_for, t.rows, [&](size_t first, size_t last) {
      for (size_t r = first; r < last; ++r) {
        const float* row = v.data() + r * t.cols;
        int64_t* out_row = quanta.data() + r * t.cols;
        for (uint32_t c = 0; c < t.cols; ++c) {
          out_row[c] = SelectQuanta(row[c] >= 0.0f, plus[c], minus[c]);
        }
      }
    });
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

namespace {

// The payload's checks (docs/wire-codecs.md 3), then each value's quanta to
// `sink` in flat order.
template <typename Sink>
absl::Status WalkOneBit(std::string_view bytes, uint64_t param_count, Sink& sink) {
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
  sink.Begin(param_count);
  // By row and column, no division per value.
  uint64_t i = 0, column_base = 0;
  for (const TensorShape& t : layout) {
    const int64_t* p = plus.data() + column_base;
    const int64_t* m = minus.data() + column_base;
    for (uint32_t r = 0; r < t.rows; ++r) {
      for (uint32_t c = 0; c < t.cols; ++c, ++i) {
        sink.Put(i, SelectQuanta((bits[i >> 3] >> (i & 7)) & 1, p[c], m[c]));
      }
    }
    column_base += t.cols;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status DecodeOneBit(std::string_view bytes, uint64_t param_count,
                          std::vector<int64_t>* quanta) {
  QuantaStore store(quanta);
  return WalkOneBit(bytes, param_count, store);
}

absl::Status CheckOneBit(std::string_view bytes, std::span<const int64_t> quanta) {
  QuantaCompare compare(quanta);
  RECKON_RETURN_IF_ERROR(WalkOneBit(bytes, quanta.size(), compare));
  return compare.Result("onebit");
}

}  // namespace reckon::codec::payload
