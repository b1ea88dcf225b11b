// Internal to codec/: the byte-level pieces the quanta codecs share
// (docs/wire-codecs.md 1-2): little-endian fields, the tensor-layout header, and
// the per-codec encoders and payload decoders behind codec.h.
//
// Threads: functions, any thread. Errors: a payload that does not decode is
// kDataLoss naming the field.
#ifndef RECKON_CODEC_CODEC_PAYLOAD_H_
#define RECKON_CODEC_CODEC_PAYLOAD_H_

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "codec/codec.h"

namespace reckon::codec::payload {

// Four little-endian bytes at `p`.
inline void StoreU32(char* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
inline void PutU32(std::string* out, uint32_t v) {
  char b[4];
  StoreU32(b, v);
  out->append(b, 4);
}
inline uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t{static_cast<uint8_t>(p[i])} << (8 * i);
  return v;
}
inline void PutF32(std::string* out, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  PutU32(out, bits);
}
inline float GetF32(const char* p) {
  const uint32_t bits = GetU32(p);
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

// Appends the layout header: u32 T, then T x (u32 rows, u32 cols).
void PutLayout(const TensorLayout& layout, std::string* out);

// Reads the layout header at the start of `bytes` and checks it against
// param_count (T >= 1, rows and cols >= 1, sizes summing to param_count);
// `*consumed` is its length. kDataLoss "<codec>: <what is wrong>".
// Allocates nothing before T is known to fit in `bytes`.
absl::Status ParseLayout(std::string_view codec, std::string_view bytes, uint64_t param_count,
                         TensorLayout* layout, size_t* consumed);

// kDataLoss "<what>: payload is N bytes, expected M" when they differ.
absl::Status CheckLength(std::string_view what, size_t actual, uint64_t expected);

// Where a payload decoder puts each value's quanta, in order: the one walk
// over a payload serves both the decode (QuantaStore) and the publisher's
// self-check (QuantaCompare), which so needs no decoded vector.
// Begin(n) comes after the payload's header and length have been checked.
class QuantaStore {
 public:
  explicit QuantaStore(std::vector<int64_t>* out) : out_(out) {}
  void Begin(uint64_t n) {
    out_->resize(n);
    data_ = out_->data();
  }
  void Put(uint64_t i, int64_t q) { data_[i] = q; }

 private:
  std::vector<int64_t>* out_;
  int64_t* data_ = nullptr;
};

class QuantaCompare {
 public:
  explicit QuantaCompare(std::span<const int64_t> expected) : expected_(expected) {}
  void Begin(uint64_t) {}
  // A branch that is never taken while the payload agrees.
  void Put(uint64_t i, int64_t q) {
    if (q != expected_[i] && first_ == kNone) {
      first_ = i;
      got_ = q;
    }
  }
  // OK, or kInternal "<codec>: value I decodes to Q quanta, not the E encoded".
  absl::Status Result(const char* codec) const;

 private:
  static constexpr uint64_t kNone = ~uint64_t{0};
  std::span<const int64_t> expected_;
  uint64_t first_ = kNone;
  int64_t got_ = 0;
};

// The per-codec halves of codec.h.
std::unique_ptr<Codec> MakeDenseFp32(const CodecOptions& options);
std::unique_ptr<Codec> MakeOneBit(const CodecOptions& options);
std::unique_ptr<Codec> MakeDynTree8(const CodecOptions& options);
absl::Status DecodeDenseFp32(std::string_view bytes, uint64_t param_count,
                             std::vector<int64_t>* quanta);
absl::Status DecodeOneBit(std::string_view bytes, uint64_t param_count,
                          std::vector<int64_t>* quanta);
absl::Status DecodeDynTree8(std::string_view bytes, uint64_t param_count,
                            std::vector<int64_t>* quanta);
// Whether the payload decodes to exactly `quanta` (CheckQuantaPayload,
// codec.h): the decoders' checks and walk, comparing instead of storing.
absl::Status CheckDenseFp32(std::string_view bytes, QuantaSpan expected,
                            const ParallelFor& parallel_for);
absl::Status CheckOneBit(std::string_view bytes, std::span<const int64_t> quanta);
absl::Status CheckDynTree8(std::string_view bytes, std::span<const int64_t> quanta);

// Fills the header fields every quanta codec sets the same way (count =
// param_count, step_quanta = 0, rice_k = 0, crc32c of the payload, on
// parallel_for's threads when not null: Crc32cOnThreads).
void FinishMessage(v1::Codec codec, uint64_t param_count, const ParallelFor& parallel_for,
                   v1::Update* msg);
// The same with the payload's CRC given (an encoder that computed it block
// by block as it wrote them).
void FinishMessageWithCrc(v1::Codec codec, uint64_t param_count, uint32_t crc, v1::Update* msg);

// The refusal of a payload whose CRC-32C is `computed` where its header
// says `header` (OK when they agree).
absl::Status CheckPayloadCrc(uint32_t computed, uint32_t header);

// What a dense payload's check (CheckDenseFp32Payload) does with each block
// of values it has checked, while the block is in the L1 cache: a copy of
// it (a receiver's decode), or its sum into a replica (the publisher's
// self-check and its own apply, FixedPointReplica::ApplyCheckedDenseFp32).
struct DenseFp32BlockSink {
  // Values [first, first + len), every one a count of quanta, their bytes
  // at `at`: called on the chunk's thread for its blocks in order, up to
  // the first block that holds a value that is not (neither that block
  // nor the chunk's later ones are taken). Null: nothing is done.
  std::function<void(size_t first, size_t len, const char* at)> take;
  // Undoes `take` over values [first, first + len), a run of blocks it
  // took (a check that failed after it took some; a ParallelFor that broke
  // its contract, whose pass is then made again on the caller's thread).
  // Called on the caller's thread after every chunk returned. Null where
  // what was taken may stay (a copy its caller drops on failure, and
  // writes the same bytes again on a second pass).
  std::function<void(size_t first, size_t len)> give_back;
};

// A dense payload (4 bytes a value) checked as every receiver checks one,
// in one pass on parallel_for's threads, kCacheBlockValues values at a
// time while each block is in the L1 cache: its CRC-32C (every byte,
// a tail of fewer than 4 too) must be `crc`, and every value an integral
// number of quanta below 2^62 in magnitude; `sink` takes each block as it
// passes. Its readers so read the payload once, not once for the CRC, once
// for the values and once more for a copy or an apply. All or nothing: OK
// with every block taken exactly once; otherwise kDataLoss naming the CRC
// (checked first) or the first value that is not a count of quanta, with
// everything taken given back.
absl::Status CheckDenseFp32Payload(std::string_view bytes, uint32_t crc,
                                   const DenseFp32BlockSink& sink,
                                   const ParallelFor& parallel_for);
// kDataLoss naming the first value of `bytes` that is not a count of quanta
// (OK when there is none): the words of a scan that found one.
absl::Status DenseFp32ValueError(std::string_view bytes);

// For an encoder whose values are read until its end (onebit's signs,
// dyntree8's tensors): every quanta index reported written at once, on
// parallel_for's threads (Codec::QuantaWritten; nothing when null).
void ReportAllWritten(const ParallelFor& parallel_for, size_t n,
                      const Codec::QuantaWritten& written);

}  // namespace reckon::codec::payload

#endif  // RECKON_CODEC_CODEC_PAYLOAD_H_
