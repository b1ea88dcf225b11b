#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
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

TEST(ThreadPool, BlocksCoverEveryIndexOnceInContiguousRanges) {
  for (const int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (const size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{100}, size_t{100003}}) {
      for (const size_t min_share : {size_t{1}, size_t{16384}}) {
        std::vector<std::atomic<int>> hits(n);
        std::atomic<int> calls{0};
        pool.ParallelForBlocks(
            n,
            [&](size_t begin, size_t end) {
              ASSERT_TRUE(begin < end || n == 0) << begin << ", " << end;
              ++calls;
              for (size_t i = begin; i < end; ++i) ++hits[i];
            },
            min_share);
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;
        EXPECT_LE(calls.load(), std::max(1, threads) * ThreadPool::kBlocksPerShare);
      }
    }
  }
}

// A thread held inside one block (as a VM holds a preempted vCPU, or a
// helper still waking) leaves the rest of its share to the others: the
// held block waits until every other block is done, which only stealing
// lets happen. Static chunks would leave it waiting out its deadline.
TEST(ThreadPool, BlocksLeftByAHeldThreadAreTakenByTheOthers) {
  for (const int threads : {2, 3}) {
    ThreadPool pool(threads);
    for (int held_share = 0; held_share < threads; ++held_share) {
      SCOPED_TRACE(::testing::Message() << threads << " threads, share " << held_share << " held");
      const size_t n = 1200;
      const size_t held_begin = n * held_share / threads;
      std::mutex mu;
      std::vector<std::pair<size_t, std::thread::id>> ran;
      std::atomic<size_t> done{0};
      const size_t blocks = size_t(threads) * ThreadPool::kBlocksPerShare;
      bool released = false;
      std::thread::id held_by;
      pool.ParallelForBlocks(
          n,
          [&](size_t begin, size_t) {
            if (begin == held_begin) {
              held_by = std::this_thread::get_id();
              const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
              while (done.load() < blocks - 1 && std::chrono::steady_clock::now() < deadline) {
                std::this_thread::sleep_for(std::chrono::microseconds(100));
              }
              released = done.load() == blocks - 1;
            }
            {
              std::lock_guard lock(mu);
              ran.push_back({begin, std::this_thread::get_id()});
            }
            ++done;
          },
          1);
      EXPECT_TRUE(released) << "the held block's share was not taken by the other threads";
      ASSERT_EQ(ran.size(), blocks);
      // Every other block of the held share ran on another thread.
      const size_t held_end = n * (held_share + 1) / threads;
      for (const auto& [begin, id] : ran) {
        if (begin > held_begin && begin < held_end) {
          EXPECT_NE(id, held_by) << begin;
        }
      }
    }
  }
}

}  // namespace
}  // namespace reckon::base
