// A quanta codec's decoded update: one signed count of quanta a parameter
// (docs/wire-codecs.md 1), in one of two layouts.
//
//  - int64, one a parameter: what onebit's and dyntree8's payloads expand
//    to (their payload values are shared by many parameters).
//  - The dense fp32 payload itself, four little-endian bytes a parameter:
//    every value a float32 integer below 2^62 in magnitude, so each converts
//    to int64 exactly. A dense message is its own decoded form: no int64
//    copy is written, held or read (it was 8 of the 72 bytes a parameter a
//    dense step moved, written by the encoder and read by the feedback, the
//    self-check and every replica's apply; docs/benchmarks.md).
//
// A view: the bytes belong to whoever made it (a DecodedUpdate, an
// Emission's message) and must outlive it. A view of dense bytes REQUIRES
// that they passed DecodeUpdate's or the publisher's check (or that the
// dense encoder wrote them): its users convert without checking again.
//
// Threads: a value; any thread may read through it while its bytes are
// not written.
#ifndef RECKON_CODEC_QUANTA_SPAN_H_
#define RECKON_CODEC_QUANTA_SPAN_H_

#include <bit>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace reckon::codec {

class QuantaSpan {
 public:
  QuantaSpan() = default;
  // The int64 layout (implicit: a vector or span of quanta is a QuantaSpan).
  QuantaSpan(std::span<const int64_t> quanta) : int64s_(quanta.data()), size_(quanta.size()) {}
  QuantaSpan(const std::vector<int64_t>& quanta) : QuantaSpan(std::span<const int64_t>(quanta)) {}
  // The dense fp32 layout over a checked payload (4 bytes a value).
  static QuantaSpan DenseFp32(std::string_view checked_payload) {
    QuantaSpan s;
    s.fp32_bytes_ = checked_payload.data();
    s.size_ = checked_payload.size() / 4;
    return s;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  // Which layout: the payload's bytes, or the int64 values (the other null).
  bool is_dense_fp32() const { return fp32_bytes_ != nullptr; }
  const char* dense_fp32_bytes() const { return fp32_bytes_; }
  const int64_t* int64s() const { return int64s_; }

  // The count at `i` (< size()).
  int64_t operator[](size_t i) const {
    if (fp32_bytes_ == nullptr) return int64s_[i];
    uint32_t bits = 0;  // four little-endian bytes, on any host
    for (int b = 0; b < 4; ++b) bits |= uint32_t(uint8_t(fp32_bytes_[4 * i + b])) << (8 * b);
    return static_cast<int64_t>(std::bit_cast<float>(bits));
  }
  // Counts [begin, end) as int64 into out[0, end - begin): a copy, or the
  // dense values converted (elementwise.h), for a consumer that takes int64
  // (the CUDA replica's upload, a checksum over a whole vector).
  void CopyTo(size_t begin, size_t end, int64_t* out) const;
  std::vector<int64_t> ToVector() const {
    std::vector<int64_t> out(size_);
    CopyTo(0, size_, out.data());
    return out;
  }

 private:
  const int64_t* int64s_ = nullptr;
  const char* fp32_bytes_ = nullptr;
  size_t size_ = 0;
};

}  // namespace reckon::codec

#endif  // RECKON_CODEC_QUANTA_SPAN_H_
