// The launch shape the elementwise kernels share: blocks of kThreads
// threads (a multiple of 32, so warps stay whole: the onebit sign ballot
// relies on it), at most kMaxBlocks blocks, the rest covered by
// grid-stride loops. nvcc only (C++17).
#ifndef RECKON_CUDA_LAUNCH_SHAPE_H_
#define RECKON_CUDA_LAUNCH_SHAPE_H_

#include <cstdint>

namespace reckon::cuda {

inline constexpr int kThreads = 256;
inline constexpr unsigned kMaxBlocks = 1u << 16;

// Blocks for n elements, one a thread: at least 1, at most kMaxBlocks.
inline unsigned Blocks(uint64_t n) {
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? (blocks == 0 ? 1 : blocks) : kMaxBlocks);
}

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_LAUNCH_SHAPE_H_
