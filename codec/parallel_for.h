// How a caller lends its threads to a codec pass: the codec has no threads
// of its own. Threads: a ParallelFor is called by one thread at a time (its
// owner's contract, e.g. base::ThreadPool's one caller), and the chunks it
// runs may run on other threads at once, each on its own range.
#ifndef RECKON_CODEC_PARALLEL_FOR_H_
#define RECKON_CODEC_PARALLEL_FOR_H_

#include <cstddef>
#include <functional>

namespace reckon::codec {

// Runs fn(begin, end) over contiguous chunks covering [0, n) exactly once
// (in any order, possibly in parallel) and returns when all are done.
using ParallelFor = std::function<void(size_t n, const std::function<void(size_t, size_t)>& fn)>;

// parallel_for(n, fn), or fn(0, n) on this thread when it is null.
inline void ForChunks(const ParallelFor& parallel_for, size_t n,
                      const std::function<void(size_t, size_t)>& fn) {
  if (parallel_for) {
    parallel_for(n, fn);
  } else {
    fn(0, n);
  }
}

}  // namespace reckon::codec

#endif  // RECKON_CODEC_PARALLEL_FOR_H_
