#include "base/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>

namespace reckon::base {
namespace {

// Chunk i of n split into `chunks` nearly equal contiguous ranges.
std::pair<size_t, size_t> Chunk(size_t n, size_t chunks, size_t i) {
  return {n * i / chunks, n * (i + 1) / chunks};
}

// How many chunks (shares) a call makes: one a thread, fewer where one
// would hold less than `min_chunk`.
size_t ChunksFor(size_t n, size_t threads, size_t min_chunk) {
  return std::max<size_t>(1, std::min<size_t>(threads, n / std::max<size_t>(1, min_chunk)));
}

// Spins (with a CPU pause) until done() or kSpinMicros have passed.
template <typename Done>
bool SpinUntil(Done done) {
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::microseconds(ThreadPool::kSpinMicros);
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
}

}  // namespace

ThreadPool::ThreadPool(int threads, const std::string& name_prefix)
    : next_block_(std::make_unique<NextBlock[]>(static_cast<size_t>(std::max(1, threads)))) {
  for (int i = 1; i < threads; ++i) {
    helpers_.emplace_back([this, i] { HelperLoop(i); });
    const std::string name = (name_prefix + "-" + std::to_string(i)).substr(0, 15);
    pthread_setname_np(helpers_.back().native_handle(), name.c_str());
  }
}

ThreadPool::~ThreadPool() {
  {
    absl::MutexLock lock(&mu_);
    shutdown_ = true;
  }
  work_cv_.SignalAll();
  for (std::thread& t : helpers_) t.join();
}

void ThreadPool::ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn,
                             size_t min_chunk) {
  RunAll(n, min_chunk, /*blocks=*/false, fn);
}

void ThreadPool::ParallelForBlocks(size_t n, const std::function<void(size_t, size_t)>& fn,
                                   size_t min_share) {
  RunAll(n, min_share, /*blocks=*/true, fn);
}

void ThreadPool::RunAll(size_t n, size_t min_chunk, bool blocks,
                        const std::function<void(size_t, size_t)>& fn) {
  const size_t chunks = ChunksFor(n, threads(), min_chunk);
  if (chunks == 1) {
    fn(0, n);
    return;
  }
  {
    absl::MutexLock lock(&mu_);
    fn_ = &fn;
    n_ = n;
    chunks_ = chunks;
    blocks_ = blocks;
    if (blocks) {
      for (size_t s = 0; s < chunks; ++s) next_block_[s].index.store(0, std::memory_order_relaxed);
    }
    pending_.store(static_cast<int>(chunks) - 1, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  work_cv_.SignalAll();
  if (blocks) {
    RunBlocks(0, fn, n, chunks);
  } else {
    const auto [begin, end] = Chunk(n, chunks, 0);
    fn(begin, end);
  }
  if (!SpinUntil([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    absl::MutexLock lock(&mu_);
    while (pending_.load(std::memory_order_acquire) != 0) done_cv_.Wait(&mu_);
  }
}

void ThreadPool::RunBlocks(size_t first, const std::function<void(size_t, size_t)>& fn, size_t n,
                           size_t shares) {
  for (size_t k = 0; k < shares; ++k) {
    const size_t share = (first + k) % shares;
    const auto [share_begin, share_end] = Chunk(n, shares, share);
    const size_t size = share_end - share_begin;
    const size_t blocks = std::min<size_t>(kBlocksPerShare, size);
    for (;;) {
      const size_t b = next_block_[share].index.fetch_add(1, std::memory_order_relaxed);
      if (b >= blocks) break;
      fn(share_begin + size * b / blocks, share_begin + size * (b + 1) / blocks);
    }
  }
}

void ThreadPool::HelperLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    SpinUntil([&] { return generation_.load(std::memory_order_acquire) != seen; });
    const std::function<void(size_t, size_t)>* fn;
    size_t n, chunks;
    bool blocks;
    {
      absl::MutexLock lock(&mu_);
      while (!shutdown_ && generation_.load(std::memory_order_acquire) == seen) {
        work_cv_.Wait(&mu_);
      }
      if (shutdown_) return;
      seen = generation_.load(std::memory_order_acquire);
      if (static_cast<size_t>(index) >= chunks_) continue;  // not needed this round
      fn = fn_;
      n = n_;
      chunks = chunks_;
      blocks = blocks_;
    }
    if (blocks) {
      RunBlocks(static_cast<size_t>(index), *fn, n, chunks);
    } else {
      const auto [begin, end] = Chunk(n, chunks, static_cast<size_t>(index));
      (*fn)(begin, end);
    }
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      absl::MutexLock lock(&mu_);  // pairs with the caller's wait
      done_cv_.Signal();
    }
  }
}

}  // namespace reckon::base
