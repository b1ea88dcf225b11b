// The Update message (docs/wire.md §4) to and from a validated update set. This is
// the only place where bytes from the network become updates: everything
// docs/wire.md requires is checked here, before anything can be applied.
#ifndef RECKON_CODEC_UPDATE_MESSAGE_H_
#define RECKON_CODEC_UPDATE_MESSAGE_H_

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"

namespace reckon::codec {

// Largest serialized Update accepted by ParseUpdate by default: a 2^31
// parameter model fully emitted as packed32 is 8 GiB, so real messages are far
// below this; anything larger is refused before protobuf allocates for it.
inline constexpr size_t kDefaultMaxUpdateBytes = size_t{256} << 20;

// A decoded threshold update: apply with FixedPointReplica::Apply(step_quanta, words).
struct DecodedUpdate {
  std::string node_id;
  uint64_t incarnation = 0;
  uint64_t seq = 0;
  v1::Codec codec = v1::CODEC_UNSPECIFIED;
  uint64_t param_count = 0;
  int64_t step_quanta = 0;
  std::vector<uint32_t> words;  // (sign << 31) | index, strictly ascending
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
// On error `*out->words` is empty and nothing should be applied:
//   kDataLoss: corrupt (CRC mismatch, bad payload, step_quanta <= 0,
//              count > param_count, k > 30, param_count > 2^31, unknown codec);
//   kUnimplemented: a codec docs/wire.md names that this build cannot decode.
absl::Status DecodeUpdate(const v1::Update& msg, DecodedUpdate* out);

// Bits on the wire per update for the payload alone (8 * payload / count).
double PayloadBitsPerUpdate(const v1::Update& msg);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_UPDATE_MESSAGE_H_
