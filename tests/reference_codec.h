// Deliberately simple reference decoders, written from docs/wire.md §3 alone: one
// bit at a time, 128-bit arithmetic, no shortcuts. Tests and fuzz targets
// compare the fast decoders in codec/ against these; they must agree on
// every input, valid or not.
#ifndef RECKON_TESTS_REFERENCE_CODEC_H_
#define RECKON_TESTS_REFERENCE_CODEC_H_

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace reckon::testing {

// The decoded words, or nullopt when docs/wire.md requires a rejection.
std::optional<std::vector<uint32_t>> ReferenceDecodeRice(std::string_view payload, uint64_t count,
                                                         uint32_t k, uint64_t param_count);
std::optional<std::vector<uint32_t>> ReferenceDecodePacked32(std::string_view payload,
                                                             uint64_t count, uint64_t param_count);

// docs/wire-codecs.md, field by field: the decoded quanta of a CODEC_ONEBIT (3),
// CODEC_DYNTREE8 (4) or CODEC_DENSE_FP32 (5) payload, or nullopt when the
// spec requires a rejection. Magnitudes come from the spec's formula in
// 128-bit integers, not from the codec's tables.
std::optional<std::vector<int64_t>> ReferenceDecodeQuanta(int codec, std::string_view payload,
                                                          uint64_t param_count);

// A bit-at-a-time Rice encoder, for checking the fast encoder's bytes.
std::string ReferenceEncodeRice(const std::vector<uint32_t>& words, uint32_t k);

}  // namespace reckon::testing

#endif  // RECKON_TESTS_REFERENCE_CODEC_H_
