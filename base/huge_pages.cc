#include "base/huge_pages.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

namespace reckon::base {

void* AllocateForRandomAccess(size_t bytes) {
  if (bytes < kHugePageBytes) return ::operator new(bytes);
  const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  void* p = std::aligned_alloc(kHugePageBytes, rounded);
  if (p == nullptr) throw std::bad_alloc();
  // Advice only: where the kernel has no transparent huge pages it fails,
  // and the memory is the same.
  (void)::madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

void FreeForRandomAccess(void* p, size_t bytes) noexcept {
  if (bytes < kHugePageBytes) {
    ::operator delete(p);
    return;
  }
  std::free(p);
}

}  // namespace reckon::base
