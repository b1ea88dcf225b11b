// TimedQueue: items handed over when due on the queue's clock
// (server/timed_queue.h), here on a manual clock.
#include "server/timed_queue.h"

#include <gtest/gtest.h>

#include <vector>

#include "absl/synchronization/mutex.h"
#include "tests/inproc_cluster.h"

namespace reckon::server {
namespace {

using std::chrono::milliseconds;
using testing::ManualClock;

// DeliverDue hands over, before it returns, every item due by the clock's
// time, in order of due time and of Push, each once, whether the queue's
// own thread (which looks every 2 ms) or the caller delivers it; nothing
// that is not due yet.
TEST(TimedQueue, DeliverDueHandsOverWhatIsDueBeforeItReturns) {
  ManualClock clock;
  absl::Mutex mu;
  std::vector<int> delivered;
  auto seen = [&] {
    absl::MutexLock l(&mu);
    return delivered;
  };
  TimedQueue<int> queue(
      "test-timed", [&](int& item) {
        absl::MutexLock l(&mu);
        delivered.push_back(item);
      },
      clock.Function());
  for (int round = 0; round < 200; ++round) {
    const auto start = clock.Now();
    queue.Push(start + milliseconds(20), 3 * round);
    queue.Push(start + milliseconds(10), 3 * round + 1);
    queue.Push(start + milliseconds(10), 3 * round + 2);
    queue.DeliverDue();
    ASSERT_EQ(seen().size(), 3u * round) << "nothing was due";
    clock.Advance(milliseconds(10));
    queue.DeliverDue();
    ASSERT_EQ(seen().size(), 3u * round + 2) << round;
    EXPECT_EQ(seen()[3 * round], 3 * round + 1);
    EXPECT_EQ(seen()[3 * round + 1], 3 * round + 2);
    clock.Advance(milliseconds(10));
    queue.DeliverDue();
    ASSERT_EQ(seen().size(), 3u * round + 3) << round;
    EXPECT_EQ(seen()[3 * round + 2], 3 * round);
  }
}

}  // namespace
}  // namespace reckon::server
