// A fixed set of named helper threads, for the CPU backend's elementwise
// passes (the GEMMs have OpenBLAS's own threads) and the gossip node's
// validation of received Updates. One caller at a time.
#ifndef RECKON_BASE_THREAD_POOL_H_
#define RECKON_BASE_THREAD_POOL_H_

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace reckon::base {

class ThreadPool {
 public:
  // `threads` workers in all, the caller included: threads - 1 helpers named
  // "<name>-N" (at most 15 characters in all). threads <= 1 runs everything
  // on the caller.
  explicit ThreadPool(int threads, const std::string& name = "reckon-cpu");
  ~ThreadPool();  // joins the helpers
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  // Splits [0, n) into threads() contiguous chunks (fewer when a chunk
  // would hold less than `min_chunk`) and calls fn(begin, end) once per
  // chunk, the first on the calling thread. Blocks until every chunk is
  // done. REQUIRES: one caller at a time; fn must not call ParallelFor.
  void ParallelFor(size_t n, const std::function<void(size_t, size_t)>& fn,
                   size_t min_chunk = 16384);

  // ParallelFor's shares (`min_share` as its min_chunk), each cut into
  // kBlocksPerShare contiguous blocks: a thread runs its own share's blocks
  // in order, then takes the blocks the others have not begun. A thread
  // that starts late (a helper waking from its condition variable) or is
  // stopped between blocks (a VM's preempted vCPU) leaves the rest of its
  // share to the others instead of making them wait; without either, each
  // thread runs its own share, as ParallelFor. fn runs at most
  // threads() * kBlocksPerShare times; a caller that combines per-call
  // results (a CRC's pieces) pays for that many. Same REQUIRES.
  static constexpr int kBlocksPerShare = 4;
  void ParallelForBlocks(size_t n, const std::function<void(size_t, size_t)>& fn,
                         size_t min_share = 16384);

 private:
  // Runs blocks of the shares from `first` on, wrapping, until none is
  // left untaken (block mode).
  void RunBlocks(size_t first, const std::function<void(size_t, size_t)>& fn, size_t n,
                 size_t shares);
  // Both calls: on the caller alone where one chunk would do; otherwise
  // announces the call to the helpers and runs the caller's chunk (or its
  // share's blocks first), then waits for theirs.
  void RunAll(size_t n, size_t min_chunk, bool blocks,
              const std::function<void(size_t, size_t)>& fn);
  void HelperLoop(int index);

  // A helper (or the caller waiting for helpers) spins this long for the
  // next event before sleeping on a condition variable: a step issues about
  // a dozen ParallelFor calls back to back, and a futex wake costs more
  // than that on a VM.
 public:
  static constexpr int kSpinMicros = 50;

 private:
  std::vector<std::thread> helpers_;
  absl::Mutex mu_;
  absl::CondVar work_cv_, done_cv_;
  const std::function<void(size_t, size_t)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  size_t n_ ABSL_GUARDED_BY(mu_) = 0;
  size_t chunks_ ABSL_GUARDED_BY(mu_) = 0;
  bool blocks_ ABSL_GUARDED_BY(mu_) = false;  // ParallelForBlocks's call
  // Block mode: the next block of each share a thread may take (0 to
  // kBlocksPerShare; past it, none left). Reset under mu_ before a call's
  // generation is published, then taken by fetch_add from any thread.
  struct alignas(64) NextBlock {
    std::atomic<size_t> index{0};
  };
  std::unique_ptr<NextBlock[]> next_block_;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
  // Written under mu_, also read without it while spinning.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
};

}  // namespace reckon::base

#endif  // RECKON_BASE_THREAD_POOL_H_
