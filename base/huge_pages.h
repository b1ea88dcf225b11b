// Memory for large arrays touched at random: replicas of tens to hundreds of
// MB, where each applied update is a cache miss, and with 4 KiB pages also a
// TLB miss whose page walk misses the caches once other threads stream
// through them (a gossip node's apply cost 2.5x inside the node what it
// cost alone: docs/benchmarks.md "bench inbound"). Blocks of 2 MiB or more
// are aligned to 2 MiB and advised MADV_HUGEPAGE, so that Linux backs them
// with transparent huge pages where it allows them ("madvise" or "always" in
// /sys/kernel/mm/transparent_hugepage/enabled): one TLB entry then covers
// 512 times what a 4 KiB page does. Smaller blocks are plain operator new.
// Where the kernel gives no huge pages the memory works the same.
#ifndef RECKON_BASE_HUGE_PAGES_H_
#define RECKON_BASE_HUGE_PAGES_H_

#include <cstddef>

namespace reckon::base {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

// Throws std::bad_alloc when out of memory, as operator new does.
void* AllocateForRandomAccess(size_t bytes);
// `bytes`: what was allocated.
void FreeForRandomAccess(void* p, size_t bytes) noexcept;

template <typename T>
struct RandomAccessAllocator {
  using value_type = T;
  RandomAccessAllocator() = default;
  template <typename U>
  RandomAccessAllocator(const RandomAccessAllocator<U>&) {}  // NOLINT: allocator conversion
  T* allocate(size_t n) { return static_cast<T*>(AllocateForRandomAccess(n * sizeof(T))); }
  void deallocate(T* p, size_t n) noexcept { FreeForRandomAccess(p, n * sizeof(T)); }
  template <typename U>
  bool operator==(const RandomAccessAllocator<U>&) const {
    return true;
  }
};

}  // namespace reckon::base

#endif  // RECKON_BASE_HUGE_PAGES_H_
