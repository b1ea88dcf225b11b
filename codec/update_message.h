// The Update message (docs/wire.md §4) to and from a validated update set. This is
// the only place where bytes from the network become updates: everything
// docs/wire.md requires is checked here, before anything can be applied.
//
// Threads: functions, any thread (the node validates on several at once).
// Errors: a message that is not valid is kDataLoss or kInvalidArgument, one
// too large kResourceExhausted, each naming what is wrong.
#ifndef RECKON_CODEC_UPDATE_MESSAGE_H_
#define RECKON_CODEC_UPDATE_MESSAGE_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "codec/quanta_span.h"
#include "codec/weight_checksum.h"
#include "proto/reckon.pb.h"

namespace reckon::codec {

// Largest serialized Update accepted by ParseUpdate by default: a 2^31
// parameter model fully emitted as packed32 is 8 GiB, so real messages are far
// below this; anything larger is refused before protobuf allocates for it.
inline constexpr size_t kDefaultMaxUpdateBytes = size_t{256} << 20;

// True for the codecs whose decoded form is quanta per parameter.
inline bool IsQuantaCodec(v1::Codec codec) {
  return codec == v1::CODEC_ONEBIT || codec == v1::CODEC_DYNTREE8 || codec == v1::CODEC_DENSE_FP32;
}

// A decoded update. Threshold codecs: +-step_quanta at each word's index
// (`words`); the quanta codecs (codec.h): one count a parameter, as int64
// `quanta` (onebit, dyntree8) or as the checked payload `dense_fp32`
// (dense fp32: its own decoded form, quanta_span.h); decoded_quanta() views
// either. Exactly one of the three is used.
struct DecodedUpdate {
  std::string node_id;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  v1::Codec codec = v1::CODEC_UNSPECIFIED;
  uint64_t param_count = 0;
  int64_t step_quanta = 0;
  std::vector<uint32_t> words;  // (sign << 31) | index, strictly ascending
  std::vector<int64_t> quanta;  // onebit, dyntree8: param_count values
  std::string dense_fp32;       // dense fp32: the checked payload, 4 bytes a value

  bool dense() const { return IsQuantaCodec(codec); }
  // A quanta codec's counts, in whichever layout it holds them.
  QuantaSpan decoded_quanta() const {
    return codec == v1::CODEC_DENSE_FP32 ? QuantaSpan::DenseFp32(dense_fp32) : QuantaSpan(quanta);
  }
};

// Fills the codec fields of `*msg` (codec, param_count, count, rice_k,
// step_quanta, payload, crc32c) from `words`; origin and seq are the caller's.
// For CODEC_THRESHOLD_RICE the k that minimizes the payload is chosen.
// kInvalidArgument when words are not strictly ascending below param_count,
// param_count exceeds 2^31, step_quanta <= 0, or codec is not a threshold codec.
absl::Status EncodeThresholdUpdate(std::span<const uint32_t> words, int64_t step_quanta,
                                   uint64_t param_count, v1::Codec codec, v1::Update* msg);

// Parses serialized bytes. kDataLoss when they are not a valid protobuf
// Update; kResourceExhausted when larger than `max_bytes`.
absl::StatusOr<v1::Update> ParseUpdate(std::string_view bytes,
                                       size_t max_bytes = kDefaultMaxUpdateBytes);

// Validates `msg` completely and decodes it into `*out` (buffers reused).
// On error `out->words`, `out->quanta` and `out->dense_fp32` are empty and nothing should be
// applied: kDataLoss when corrupt. Threshold codecs (docs/wire.md): CRC
// mismatch, bad payload, step_quanta <= 0, count > param_count, k > 30,
// param_count > 2^31, unknown codec. Quanta codecs (docs/wire-codecs.md):
// count != param_count, step_quanta or rice_k not 0, CRC, or a payload
// that breaks docs/wire-codecs.md.
absl::Status DecodeUpdate(const v1::Update& msg, DecodedUpdate* out);

// The publisher's self-check of a quanta-codec message (onebit, dyntree8,
// dense): OK exactly when DecodeUpdate would accept `msg` and give
// `quanta` (a dense emission: the message's own payload, EmittedQuanta,
// so that the check is DecodeUpdate's validation alone). kDataLoss as DecodeUpdate's for a header
// or payload that breaks docs/wire-codecs.md; kInternal naming the first value that differs (or a
// codec that is not a quanta codec). Writes nothing (CheckQuantaPayload,
// codec.h). The CRC, and the dense payload's walk, run on parallel_for's
// threads when it is not null (the publisher lends the replica's).
absl::Status CheckQuantaUpdate(const v1::Update& msg, QuantaSpan quanta,
                               const ParallelFor& parallel_for = nullptr);

// The publisher's self-check of a dense message it made (CODEC_DENSE_FP32)
// and its own replica's apply of it, in one pass: each block of the payload
// checked as every receiver checks one and added while it is in the L1
// cache (FixedPointReplica::ApplyCheckedDenseFp32), not a walk for the
// check and another for the sum. The same as CheckQuantaUpdate(msg,
// EmittedQuanta(msg, ...), parallel_for) followed, where that is OK, by
// replica->ApplyDense of the payload: the same errors, and all or nothing
// (on any error the replica is unchanged). kInternal for another codec.
absl::Status CheckAndApplyDenseUpdate(const v1::Update& msg, FixedPointReplica* replica,
                                      const ParallelFor& parallel_for = nullptr);

// Applies a decoded update to a replica, all or nothing
// (FixedPointReplica::Apply or ApplyDense), in stripes on `parallel_for`'s
// threads when one is given.
absl::Status ApplyDecoded(const DecodedUpdate& update, FixedPointReplica* replica,
                          FixedPointReplica::Prefetch prefetch = FixedPointReplica::Prefetch::kOn,
                          const FixedPointReplica::ParallelFor& parallel_for = nullptr);

// The update's contribution to the replica checksum (weight_checksum.h).
uint64_t ChecksumContribution(const WeightChecksum& checksum, const DecodedUpdate& update);

// Bits on the wire per update for the payload alone (8 * payload / count).
double PayloadBitsPerUpdate(const v1::Update& msg);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_UPDATE_MESSAGE_H_
