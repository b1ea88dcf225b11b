// packed32 threshold codec (docs/wire.md §3.1): `count` little-endian uint32
// words, `(sign << 31) | index`, strictly ascending by index.
//
// Threads: functions, any thread. Errors: a payload whose words are not
// strictly ascending or not as many as it says is kDataLoss, named.
#ifndef RECKON_CODEC_PACKED32_H_
#define RECKON_CODEC_PACKED32_H_

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

namespace reckon::codec {

// Replaces `*payload` with the packed32 bytes of `words`.
// REQUIRES: ValidateUpdateWords(words, param_count) is OK.
void EncodePacked32(std::span<const uint32_t> words, std::string* payload);

// Decodes `count` updates from `payload` into `*words` (replaced).
// Returns kDataLoss, leaving `*words` empty, when the payload is not exactly
// 4*count bytes, count > param_count, param_count > 2^31, or an index is
// >= param_count, repeated or out of order.
absl::Status DecodePacked32(std::string_view payload, uint64_t count, uint64_t param_count,
                            std::vector<uint32_t>* words);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_PACKED32_H_
