#include "codec/update_words.h"

#include "absl/strings/str_cat.h"

namespace reckon::codec {

absl::Status ValidateUpdateWords(std::span<const uint32_t> words, uint64_t param_count) {
  if (param_count > kMaxParamCount) {
    return absl::InvalidArgumentError(absl::StrCat("param_count ", param_count, " exceeds 2^31"));
  }
  int64_t prev = -1;
  for (size_t i = 0; i < words.size(); ++i) {
    const int64_t index = UpdateIndex(words[i]);
    if (index <= prev) {
      return absl::InvalidArgumentError(
          absl::StrCat("update ", i, " has index ", index, ", not above the previous ", prev));
    }
    if (static_cast<uint64_t>(index) >= param_count) {
      return absl::InvalidArgumentError(
          absl::StrCat("update ", i, " has index ", index, " >= param_count ", param_count));
    }
    prev = index;
  }
  return absl::OkStatus();
}

}  // namespace reckon::codec
