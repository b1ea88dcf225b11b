#include "base/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace reckon::base {

void TuneAllocatorForLargeFrames(size_t max_reuse_bytes) {
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (tunables != nullptr && std::strstr(tunables, "glibc.malloc.") != nullptr) return;
  const int threshold = static_cast<int>(std::min<size_t>(max_reuse_bytes, 32 << 20));
  // Either call failing leaves glibc's defaults: slower, never wrong.
  mallopt(M_MMAP_THRESHOLD, threshold);
  mallopt(M_TRIM_THRESHOLD, 2 * threshold);
}

}  // namespace reckon::base
