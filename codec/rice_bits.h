// The Rice coder's bit reading and its groups of codes (codec/rice.cc and
// codec/rice_chains.cc; not an API).
//
// Threads: functions and a reader of a caller's bytes, any thread.
#ifndef RECKON_CODEC_RICE_BITS_H_
#define RECKON_CODEC_RICE_BITS_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace reckon::codec {

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

// Codes at the optimal k average about k + 3 bits, so this many usually fit
// in the 56 bits the writer takes at once and the 57 the reader sees at once.
// Encoder and decoder use it to work on groups of codes with one check per
// group instead of a branch per code; a group that does not fit (rare) goes
// one code at a time.
inline size_t GroupSize(uint32_t k) { return std::clamp<size_t>(48 / (k + 3), 1, 8); }

// Calls fn.template operator()<G>() with G == group, a compile-time constant.
template <typename Fn>
void DispatchGroupSize(size_t group, Fn& fn) {
  switch (group) {
    case 1:
      fn.template operator()<1>();
      break;
    case 2:
      fn.template operator()<2>();
      break;
    case 3:
      fn.template operator()<3>();
      break;
    case 4:
      fn.template operator()<4>();
      break;
    case 5:
      fn.template operator()<5>();
      break;
    case 6:
      fn.template operator()<6>();
      break;
    case 7:
      fn.template operator()<7>();
      break;
    default:
      fn.template operator()<8>();
      break;
  }
}

}  // namespace reckon::codec

#endif  // RECKON_CODEC_RICE_BITS_H_
