// Random update sets for tests.
#ifndef RECKON_TESTS_TEST_UTIL_H_
#define RECKON_TESTS_TEST_UTIL_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "codec/update_words.h"

namespace reckon::testing {

// `count` distinct random indices below `param_count`, ascending, random
// signs (all negative when `all_negative`). REQUIRES: count <= param_count.
inline std::vector<uint32_t> RandomUpdates(uint64_t count, uint64_t param_count, uint64_t seed,
                                           bool all_negative = false) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> indices;
  if (count * 2 > param_count) {
    // Dense: choose by shuffling all positions.
    indices.resize(param_count);
    for (uint64_t i = 0; i < param_count; ++i) indices[i] = static_cast<uint32_t>(i);
    std::shuffle(indices.begin(), indices.end(), rng);
    indices.resize(count);
  } else {
    std::uniform_int_distribution<uint64_t> pick(0, param_count - 1);
    std::vector<bool> taken(param_count, false);
    while (indices.size() < count) {
      const uint64_t i = pick(rng);
      if (!taken[i]) {
        taken[i] = true;
        indices.push_back(static_cast<uint32_t>(i));
      }
    }
  }
  std::sort(indices.begin(), indices.end());
  std::vector<uint32_t> words;
  words.reserve(count);
  for (const uint32_t i : indices) {
    words.push_back(codec::PackUpdate(i, all_negative || (rng() & 1)));
  }
  return words;
}

}  // namespace reckon::testing

#endif  // RECKON_TESTS_TEST_UTIL_H_
