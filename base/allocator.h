// Process-wide allocator settings. Every reckon main calls this first.
//
// Threads: call once, first thing in main, before any other thread starts.
// Errors: none (a setting the allocator refuses is left at its default).
#ifndef RECKON_BASE_ALLOCATOR_H_
#define RECKON_BASE_ALLOCATOR_H_

#include <cstddef>

namespace reckon::base {

// For any process that moves large gossip frames (snapshots, dense-ish
// Updates). glibc's malloc serves allocations of 128 KiB and more with mmap,
// and trims freed heap tops back to the kernel, so every received MiB-sized
// frame lands on fresh pages: one page fault per 4 KiB, which on a virtual
// machine costs more than the copy itself (`reckonctl bench transport`:
// 1 MiB frames went from ~300 to ~1,100 MB/s, docs/benchmarks.md). This keeps
// freed blocks of up to `max_reuse_bytes` in the heap for reuse. The memory
// stays reserved by the process, bounded by the largest in flight at once.
// glibc caps the threshold at 32 MiB; larger frames still use mmap. A
// GLIBC_TUNABLES naming glibc.malloc settings is left to rule instead.
void TuneAllocatorForLargeFrames(size_t max_reuse_bytes = 32 << 20);

}  // namespace reckon::base

#endif  // RECKON_BASE_ALLOCATOR_H_
