#include "tests/reference_codec.h"

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

}  // namespace reckon::testing
