#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace reckon::base {
namespace {

TEST(ThreadPool, EveryIndexExactlyOnceInContiguousChunks) {
  for (const int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.threads(), std::max(1, threads));
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{100003}}) {
      for (const size_t min_chunk : {size_t{1}, size_t{16384}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        pool.ParallelFor(
            n,
            [&](size_t begin, size_t end) {
              ASSERT_LE(begin, end);
              ++calls;
              for (size_t i = begin; i < end; ++i) ++hits[i];
            },
            min_chunk);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
        EXPECT_LE(calls.load(), threads < 1 ? 1 : threads);
      }
    }
  }
}

TEST(ThreadPool, ManyBackToBackCallsAndRepeatedConstruction) {
  // Exercises the spin-then-sleep hand-offs: results must always be complete
  // when ParallelFor returns.
  for (int round = 0; round < 20; ++round) {
    ThreadPool pool(2);
    std::vector<int> data(1000, 0);
    for (int call = 0; call < 200; ++call) {
      pool.ParallelFor(
          data.size(),
          [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) ++data[i];
          },
          1);
    }
    for (const int v : data) ASSERT_EQ(v, 200);
  }
}

}  // namespace
}  // namespace reckon::base
