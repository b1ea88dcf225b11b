#include "tests/reference_codec.h"

#include <cmath>
#include <cstring>
#include <string>

namespace reckon::testing {
namespace {

class Bits {
 public:
  explicit Bits(std::string_view data) : data_(data) {}
  // The n-th bit is bit n mod 8 of byte n / 8 (docs/wire.md §3.2).
  std::optional<int> Read() {
    if (pos_ >= data_.size() * 8) return std::nullopt;
    const int bit = (static_cast<unsigned char>(data_[pos_ / 8]) >> (pos_ % 8)) & 1;
    ++pos_;
    return bit;
  }
  uint64_t pos() const { return pos_; }

 private:
  std::string_view data_;
  uint64_t pos_ = 0;
};

}  // namespace

std::optional<std::vector<uint32_t>> ReferenceDecodeRice(std::string_view payload, uint64_t count,
                                                         uint32_t k, uint64_t param_count) {
  if (k > 30 || param_count > (uint64_t{1} << 31) || count > param_count) return std::nullopt;
  Bits bits(payload);
  std::vector<uint32_t> words;
  __int128 prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    unsigned __int128 q = 0;
    for (;;) {
      const std::optional<int> b = bits.Read();
      if (!b) return std::nullopt;  // stream ended
      if (*b == 1) break;
      ++q;
    }
    unsigned __int128 r = 0;
    for (uint32_t j = 0; j < k; ++j) {
      const std::optional<int> b = bits.Read();
      if (!b) return std::nullopt;
      r |= static_cast<unsigned __int128>(*b) << j;
    }
    const std::optional<int> sign = bits.Read();
    if (!sign) return std::nullopt;
    const unsigned __int128 gap = (q << k) | r;
    const __int128 index = prev + 1 + static_cast<__int128>(gap);
    if (index >= static_cast<__int128>(param_count)) return std::nullopt;
    words.push_back(static_cast<uint32_t>(index) | (static_cast<uint32_t>(*sign) << 31));
    prev = index;
  }
  // Padding: zero bits up to a whole byte, and nothing after.
  while (bits.pos() % 8 != 0) {
    const std::optional<int> b = bits.Read();
    if (!b) return std::nullopt;
    if (*b != 0) return std::nullopt;
  }
  if (bits.pos() != payload.size() * 8) return std::nullopt;
  return words;
}

std::optional<std::vector<uint32_t>> ReferenceDecodePacked32(std::string_view payload,
                                                             uint64_t count, uint64_t param_count) {
  if (param_count > (uint64_t{1} << 31) || count > param_count) return std::nullopt;
  if (payload.size() != count * 4) return std::nullopt;
  std::vector<uint32_t> words;
  int64_t prev = -1;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t w = 0;
    for (int b = 0; b < 4; ++b) {
      w |= static_cast<uint32_t>(static_cast<unsigned char>(payload[4 * i + b])) << (8 * b);
    }
    const int64_t index = w & 0x7FFFFFFF;
    if (index <= prev || static_cast<uint64_t>(index) >= param_count) return std::nullopt;
    words.push_back(w);
    prev = index;
  }
  return words;
}

std::string ReferenceEncodeRice(const std::vector<uint32_t>& words, uint32_t k) {
  std::string out;
  uint64_t pos = 0;
  auto put = [&](int bit) {
    if (pos % 8 == 0) out.push_back('\0');
    out.back() = static_cast<char>(static_cast<unsigned char>(out.back()) | (bit << (pos % 8)));
    ++pos;
  };
  int64_t prev = -1;
  for (const uint32_t w : words) {
    const int64_t index = w & 0x7FFFFFFF;
    const uint64_t gap = static_cast<uint64_t>(index - prev - 1);
    prev = index;
    for (uint64_t z = 0; z < (gap >> k); ++z) put(0);
    put(1);
    for (uint32_t j = 0; j < k; ++j) put(static_cast<int>((gap >> j) & 1));
    put(static_cast<int>(w >> 31));
  }
  return out;
}

namespace {

// A little-endian reader that refuses to run past the end.
class Fields {
 public:
  explicit Fields(std::string_view data) : data_(data) {}
  std::optional<uint64_t> U(int bytes) {
    if (data_.size() - pos_ < size_t(bytes) || pos_ > data_.size()) return std::nullopt;
    uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint64_t(uint8_t(data_[pos_ + i])) << (8 * i);
    pos_ += bytes;
    return v;
  }
  // A float32 that is an integer with |v| < 2^62 (docs/wire-codecs.md 1).
  std::optional<int64_t> Quanta() {
    const std::optional<uint64_t> bits = U(4);
    if (!bits) return std::nullopt;
    const uint32_t b = uint32_t(*bits);
    float f;
    std::memcpy(&f, &b, 4);
    const long double v = f;
    if (!std::isfinite(v) || std::floor(v) != v || std::fabs(v) >= std::ldexp(1.0L, 62)) {
      return std::nullopt;
    }
    return int64_t(v);
  }
  size_t left() const { return data_.size() - pos_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
};

struct Tensor {
  uint64_t rows, cols;
};

std::optional<std::vector<Tensor>> ReadLayout(Fields& f, uint64_t param_count) {
  const std::optional<uint64_t> count = f.U(4);
  if (!count || *count == 0 || *count > f.left() / 8) return std::nullopt;
  std::vector<Tensor> tensors;
  unsigned __int128 total = 0;
  for (uint64_t t = 0; t < *count; ++t) {
    const std::optional<uint64_t> rows = f.U(4), cols = f.U(4);
    if (!rows || !cols || *rows == 0 || *cols == 0) return std::nullopt;
    tensors.push_back({*rows, *cols});
    total += (unsigned __int128)(*rows) * *cols;
  }
  if (total != param_count) return std::nullopt;
  return tensors;
}

// round(scale * (2^(b+1) + 9 (2k+1)) / (10^(n+1) 2^(b+1))), half up.
int64_t ReferenceDynTree(unsigned m, int64_t scale) {
  if (m == 0) return 0;
  int n = 0;
  while (!(m & (0x40u >> n))) ++n;  // leading zeros of the 7 bits
  const unsigned b = 6 - n;
  const unsigned __int128 k = m & ((1u << b) - 1);
  const unsigned __int128 two_b1 = (unsigned __int128)1 << (b + 1);
  unsigned __int128 den = two_b1;
  for (int i = 0; i <= n; ++i) den *= 10;
  const unsigned __int128 num = (unsigned __int128)scale * (two_b1 + 9 * (2 * k + 1));
  return int64_t((2 * num + den) / (2 * den));
}

std::optional<std::vector<int64_t>> RefOneBit(Fields& f, uint64_t param_count) {
  const auto tensors = ReadLayout(f, param_count);
  if (!tensors) return std::nullopt;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> values;
  for (const Tensor& t : *tensors) {
    values.emplace_back();
    for (uint64_t c = 0; c < t.cols; ++c) {
      const auto plus = f.Quanta(), minus = f.Quanta();
      if (!plus || !minus) return std::nullopt;
      values.back().push_back({*plus, *minus});
    }
  }
  if (f.left() != (param_count + 7) / 8) return std::nullopt;
  std::vector<int> signs;
  for (uint64_t byte = 0; byte < (param_count + 7) / 8; ++byte) {
    const uint64_t v = *f.U(1);
    for (int bit = 0; bit < 8; ++bit) signs.push_back((v >> bit) & 1);
  }
  for (uint64_t i = param_count; i < signs.size(); ++i) {
    if (signs[i]) return std::nullopt;  // padding must be zero
  }
  std::vector<int64_t> out;
  for (size_t t = 0; t < tensors->size(); ++t) {
    for (uint64_t r = 0; r < (*tensors)[t].rows; ++r) {
      for (uint64_t c = 0; c < (*tensors)[t].cols; ++c) {
        out.push_back(signs[out.size()] ? values[t][c].first : values[t][c].second);
      }
    }
  }
  return out;
}

std::optional<std::vector<int64_t>> RefDynTree8(Fields& f, uint64_t param_count) {
  const auto tensors = ReadLayout(f, param_count);
  if (!tensors) return std::nullopt;
  std::vector<int64_t> scales;
  for (size_t t = 0; t < tensors->size(); ++t) {
    const auto scale = f.Quanta();
    if (!scale || *scale < 0 || *scale > (int64_t(1) << 52)) return std::nullopt;
    scales.push_back(*scale);
  }
  if (f.left() != param_count) return std::nullopt;
  std::vector<int64_t> out;
  for (size_t t = 0; t < tensors->size(); ++t) {
    for (uint64_t e = 0; e < (*tensors)[t].rows * (*tensors)[t].cols; ++e) {
      const unsigned code = unsigned(*f.U(1));
      if (code == 0x80) return std::nullopt;
      const int64_t magnitude = ReferenceDynTree(code & 0x7F, scales[t]);
      out.push_back(code & 0x80 ? -magnitude : magnitude);
    }
  }
  return out;
}

}  // namespace

std::optional<std::vector<int64_t>> ReferenceDecodeQuanta(int codec, std::string_view payload,
                                                          uint64_t param_count) {
  if (param_count > (uint64_t{1} << 31)) return std::nullopt;
  Fields f(payload);
  if (codec == 3) return RefOneBit(f, param_count);
  if (codec == 4) return RefDynTree8(f, param_count);
  if (codec != 5) return std::nullopt;
  if (payload.size() != 4 * param_count) return std::nullopt;
  std::vector<int64_t> out;
  for (uint64_t i = 0; i < param_count; ++i) {
    const auto q = f.Quanta();
    if (!q) return std::nullopt;
    out.push_back(*q);
  }
  return out;
}

}  // namespace reckon::testing
