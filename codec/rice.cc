#include "codec/rice.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/update_words.h"

namespace reckon::codec {
namespace {

// Sum over updates of ceil((gap >> k) / 2); see OptimalRiceK.
uint64_t SumHalfQuotients(std::span<const uint32_t> words, uint32_t k) {
  uint64_t sum = 0;
  uint32_t next = 0;  // previous index + 1
  for (const uint32_t w : words) {
    const uint32_t index = w & kIndexMask;
    const uint32_t gap = index - next;
    sum += ((gap >> k) + 1) >> 1;
    next = index + 1;
  }
  return sum;
}

uint64_t SumQuotients(std::span<const uint32_t> words, uint32_t k) {
  uint64_t sum = 0;
  uint32_t next = 0;
  for (const uint32_t w : words) {
    const uint32_t index = w & kIndexMask;
    sum += (index - next) >> k;
    next = index + 1;
  }
  return sum;
}

// Appends bit fields least-significant-bit first into a buffer that has at
// least 8 bytes of slack past the last byte it will complete.
class BitWriter {
 public:
  explicit BitWriter(unsigned char* out) : out_(out) {}

  // REQUIRES: len <= 56, value < 2^len.
  void Put(uint64_t value, unsigned len) {
    pending_ |= value << pending_bits_;
    pending_bits_ += len;
    // Store all 8 bytes each time (branch-free); only complete bytes advance.
    const uint64_t le = ToLittle(pending_);
    std::memcpy(out_, &le, 8);
    out_ += pending_bits_ >> 3;
    pending_ >>= pending_bits_ & ~7u;
    pending_bits_ &= 7;
  }

  void PutZeros(uint64_t n) {
    while (n > 56) {
      Put(0, 56);
      n -= 56;
    }
    Put(0, static_cast<unsigned>(n));
  }

 private:
  static uint64_t ToLittle(uint64_t v) {
    if constexpr (std::endian::native == std::endian::big) return __builtin_bswap64(v);
    return v;
  }
  unsigned char* out_;
  uint64_t pending_ = 0;
  unsigned pending_bits_ = 0;  // < 8 between calls
};

// Reads 64 bits starting at bit `pos`, zero-filled past the end of the data.
// At least 57 of them are meaningful (bit pos & 7 is shifted out below).
class BitReader {
 public:
  BitReader(const unsigned char* data, size_t size) : data_(data), size_(size) {}

  uint64_t Peek(uint64_t pos) const {
    const uint64_t byte = pos >> 3;
    uint64_t v = 0;
    if (byte + 8 <= size_) [[likely]] {
      std::memcpy(&v, data_ + byte, 8);
    } else if (byte < size_) {
      std::memcpy(&v, data_ + byte, size_ - byte);
    }
    if constexpr (std::endian::native == std::endian::big) v = __builtin_bswap64(v);
    return v >> (pos & 7);
  }

 private:
  const unsigned char* data_;
  size_t size_;
};

constexpr unsigned kPeekBits = 57;

absl::Status Corrupt(const std::string& what) {
  return absl::DataLossError(absl::StrCat("rice: ", what));
}

}  // namespace

uint64_t RiceEncodedBits(std::span<const uint32_t> words, uint32_t k) {
  return SumQuotients(words, k) + uint64_t{words.size()} * (k + 2);
}

uint32_t OptimalRiceK(std::span<const uint32_t> words) {
  if (words.empty()) return 0;
  const uint64_t count = words.size();
  // Start near log2 of the mean gap, then walk to where the slope turns.
  const uint64_t span = uint64_t{UpdateIndex(words.back())} + 1;
  const uint64_t mean_gap = span / count;
  uint32_t k = mean_gap > 1 ? std::bit_width(mean_gap) - 1 : 0;
  if (k > kMaxRiceK) k = kMaxRiceK;
  // slope(k) = bits(k+1) - bits(k) = count - SumHalfQuotients(k).
  auto slope_non_negative = [&](uint32_t kk) { return SumHalfQuotients(words, kk) <= count; };
  if (slope_non_negative(k)) {
    while (k > 0 && slope_non_negative(k - 1)) --k;
  } else {
    do {
      ++k;
    } while (k < kMaxRiceK && !slope_non_negative(k));
  }
  return k;
}

void EncodeRice(std::span<const uint32_t> words, uint32_t k, std::string* payload) {
  const uint64_t bits = RiceEncodedBits(words, k);
  const uint64_t bytes = (bits + 7) / 8;
  payload->assign(bytes + 8, '\0');  // 8 bytes of slack for BitWriter
  BitWriter writer(reinterpret_cast<unsigned char*>(payload->data()));
  const uint64_t low_mask = (uint64_t{1} << k) - 1;
  uint32_t next = 0;
  for (const uint32_t w : words) {
    const uint32_t index = w & kIndexMask;
    const uint64_t gap = index - next;
    next = index + 1;
    const uint64_t q = gap >> k;
    const uint64_t tail = (gap & low_mask) | (uint64_t{w >> 31} << k);  // r, then sign
    if (q + k + 2 <= 56) [[likely]] {
      // unary 1 at bit q, then r and sign above it: one field.
      writer.Put((uint64_t{1} | (tail << 1)) << q, static_cast<unsigned>(q + k + 2));
    } else {
      writer.PutZeros(q);
      writer.Put(uint64_t{1} | (tail << 1), k + 2);
    }
  }
  payload->resize(bytes);
}

absl::Status DecodeRice(std::string_view payload, uint64_t count, uint32_t k,
                        uint64_t param_count, std::vector<uint32_t>* words) {
  words->clear();
  if (k > kMaxRiceK) return Corrupt(absl::StrCat("k = ", k, " exceeds 30"));
  if (param_count > kMaxParamCount) {
    return Corrupt(absl::StrCat("param_count ", param_count, " exceeds 2^31"));
  }
  if (count > param_count) {
    return Corrupt(absl::StrCat("count ", count, " exceeds param_count ", param_count));
  }
  const uint64_t total_bits = uint64_t{payload.size()} * 8;
  // Each update takes at least k + 2 bits: this bounds the allocation below by
  // the payload size, whatever `count` claims.
  if (count * (k + 2) > total_bits) {
    return Corrupt(absl::StrCat("stream ends before update ", total_bits / (k + 2), " of ",
                                count, " (", payload.size(), " bytes for k = ", k, ")"));
  }
  words->resize(count);
  uint32_t* out = words->data();
  const BitReader reader(reinterpret_cast<const unsigned char*>(payload.data()), payload.size());
  const uint64_t low_mask = (uint64_t{1} << k) - 1;
  uint64_t pos = 0;
  uint64_t next = 0;  // previous index + 1
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t v = reader.Peek(pos);
    uint64_t q;
    uint64_t tail;  // r | sign << k
    if (v != 0 && std::countr_zero(v) + k + 2 <= kPeekBits) [[likely]] {
      q = std::countr_zero(v);
      tail = v >> (q + 1);
      pos += q + k + 2;
    } else {
      // Long unary run: count zeros a word at a time.
      q = 0;
      while (v == 0) {
        q += kPeekBits;
        pos += kPeekBits;
        // Bounds time by the payload size, and q << k below by 2^61.
        if (pos >= total_bits || q >= param_count) {
          words->clear();
          return Corrupt(absl::StrCat("update ", i, ": unary quotient runs past ",
                                      pos >= total_bits ? "the end of the stream"
                                                        : "param_count"));
        }
        v = reader.Peek(pos);
      }
      const unsigned zeros = std::countr_zero(v);
      q += zeros;
      pos += zeros + 1;
      if (q >= param_count) {
        words->clear();
        return Corrupt(absl::StrCat("update ", i, ": quotient ", q, " exceeds param_count"));
      }
      tail = reader.Peek(pos);
      pos += k + 1;
    }
    if (pos > total_bits) [[unlikely]] {
      words->clear();
      return Corrupt(absl::StrCat("stream ends inside update ", i, " of ", count));
    }
    const uint64_t index = next + ((q << k) | (tail & low_mask));
    if (index >= param_count) [[unlikely]] {
      words->clear();
      return Corrupt(absl::StrCat("update ", i, " has index ", index, " >= param_count ",
                                  param_count));
    }
    out[i] = static_cast<uint32_t>(index) | static_cast<uint32_t>(((tail >> k) & 1) << 31);
    next = index + 1;
  }
  const uint64_t used_bytes = (pos + 7) / 8;
  if (used_bytes != payload.size()) {
    words->clear();
    return Corrupt(absl::StrCat(payload.size() - used_bytes, " bytes after the padding (",
                                count, " updates end at byte ", used_bytes, ")"));
  }
  if (pos % 8 != 0 && (reader.Peek(pos) & 0xFF) != 0) {
    words->clear();
    return Corrupt("non-zero padding bits after the last update");
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec
