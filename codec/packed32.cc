#include "codec/packed32.h"

#include <bit>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "codec/update_words.h"

namespace reckon::codec {

void EncodePacked32(std::span<const uint32_t> words, std::string* payload) {
  payload->resize(words.size() * 4);
  if constexpr (std::endian::native == std::endian::little) {
    if (!words.empty()) std::memcpy(payload->data(), words.data(), words.size() * 4);
  } else {
    for (size_t i = 0; i < words.size(); ++i) {
      const uint32_t le = __builtin_bswap32(words[i]);
      std::memcpy(payload->data() + 4 * i, &le, 4);
    }
  }
}

absl::Status DecodePacked32(std::string_view payload, uint64_t count, uint64_t param_count,
                            std::vector<uint32_t>* words) {
  words->clear();
  if (param_count > kMaxParamCount) {
    return absl::DataLossError(
        absl::StrCat("packed32: param_count ", param_count, " exceeds 2^31"));
  }
  if (count > param_count) {
    return absl::DataLossError(
        absl::StrCat("packed32: count ", count, " exceeds param_count ", param_count));
  }
  if (payload.size() != count * 4) {
    return absl::DataLossError(absl::StrCat("packed32: payload is ", payload.size(),
                                            " bytes, expected 4 * count = ", count * 4));
  }
  words->resize(count);
  uint32_t* out = words->data();
  const char* in = payload.data();
  // One pass: load, check order and range, store. `next` is the smallest
  // index the next word may carry.
  uint64_t next = 0;
  for (uint64_t i = 0; i < count; ++i) {
    uint32_t w;
    std::memcpy(&w, in + 4 * i, 4);
    if constexpr (std::endian::native == std::endian::big) w = __builtin_bswap32(w);
    const uint64_t index = UpdateIndex(w);
    if (index < next || index >= param_count) [[unlikely]] {
      words->clear();
      if (index >= param_count) {
        return absl::DataLossError(absl::StrCat("packed32: update ", i, " has index ", index,
                                                " >= param_count ", param_count));
      }
      return absl::DataLossError(absl::StrCat("packed32: update ", i, " has index ", index,
                                              ", not above the previous ", next - 1,
                                              " (indices must be strictly ascending)"));
    }
    out[i] = w;
    next = index + 1;
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec
