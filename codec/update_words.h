// The in-memory form of a threshold update set, shared by every codec and by
// apply: one uint32 per update, `(sign << 31) | index` (the packed32 word of
// docs/wire.md §3.1), strictly ascending by index.
//
// Threads: functions, any thread. Errors: words out of order or past the
// model are kDataLoss (from the wire) or kInvalidArgument (from a caller).
#ifndef RECKON_CODEC_UPDATE_WORDS_H_
#define RECKON_CODEC_UPDATE_WORDS_H_

#include <cstdint>
#include <span>

#include "absl/status/status.h"

namespace reckon::codec {

inline constexpr uint32_t kSignBit = 1u << 31;
inline constexpr uint32_t kIndexMask = kSignBit - 1;
// param_count must not exceed this: every index has to fit in 31 bits.
inline constexpr uint64_t kMaxParamCount = uint64_t{1} << 31;

constexpr uint32_t PackUpdate(uint32_t index, bool negative) {
  return (negative ? kSignBit : 0u) | index;
}
constexpr uint32_t UpdateIndex(uint32_t word) { return word & kIndexMask; }
constexpr bool UpdateIsNegative(uint32_t word) { return (word & kSignBit) != 0; }

// OK when indices are strictly ascending and below `param_count`, and
// `param_count` is at most kMaxParamCount. Otherwise kInvalidArgument naming
// the first offending position. Encoders call this on what they are handed;
// decoders check the same rules on what they read (and say kDataLoss).
absl::Status ValidateUpdateWords(std::span<const uint32_t> words, uint64_t param_count);

}  // namespace reckon::codec

#endif  // RECKON_CODEC_UPDATE_WORDS_H_
