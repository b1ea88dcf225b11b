// Items that are due at a time, handed to a callback on a thread of their own
// when due: in time order, and in order of Push among equal times. The
// in-process network's latency and the delay fault both hold frames back
// this way.
//
// Due times are on `clock` (the steady clock unless given: a test's
// manual clock holds frames until it is moved past them; the queue looks
// at it at least every 2 ms).
//
// Threads: Push and DeliverDue from any thread. `deliver` runs on the
// queue's thread (or DeliverDue's caller) with no lock of the queue held
// but the delivery lock, so it may Push again (not DeliverDue). One
// delivery at a time: items due together are handed over in their order.
// The destructor stops the thread and drops what is still queued.
#ifndef RECKON_SERVER_TIMED_QUEUE_H_
#define RECKON_SERVER_TIMED_QUEUE_H_

#include <pthread.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace reckon::server {

template <typename T>
class TimedQueue {
 public:
  using Clock = std::chrono::steady_clock;

  // `thread_name`: at most 15 characters (the kernel's limit).
  TimedQueue(const std::string& thread_name, std::function<void(T&)> deliver,
             std::function<Clock::time_point()> clock = nullptr)
      : deliver_(std::move(deliver)),
        clock_(clock ? std::move(clock) : [] { return Clock::now(); }) {
    thread_ = std::thread([this, thread_name] {
      pthread_setname_np(pthread_self(), thread_name.c_str());
      Loop();
    });
  }
  ~TimedQueue() {
    {
      absl::MutexLock l(&mu_);
      stopping_ = true;
    }
    thread_.join();
  }
  TimedQueue(const TimedQueue&) = delete;
  TimedQueue& operator=(const TimedQueue&) = delete;

  // `due` on the queue's clock (now(): now on it).
  Clock::time_point now() const { return clock_(); }
  void Push(Clock::time_point due, T item) {
    absl::MutexLock l(&mu_);
    queue_.emplace(due, std::move(item));
  }

  // Delivers every item due by now on the queue's clock before it returns,
  // on the caller's thread (those the queue's thread had taken already are
  // delivered by then too): a test that moves a manual clock calls it so
  // that what the move made due has arrived before it looks, whenever the
  // queue's thread next wakes.
  void DeliverDue() ABSL_LOCKS_EXCLUDED(delivery_mu_, mu_) {
    absl::MutexLock d(&delivery_mu_);
    std::vector<T> due;
    {
      absl::MutexLock l(&mu_);
      const auto now = clock_();
      while (!queue_.empty() && queue_.begin()->first <= now) {
        due.push_back(std::move(queue_.begin()->second));
        queue_.erase(queue_.begin());
      }
    }
    for (T& item : due) deliver_(item);
  }

 private:
  void Loop() {
    for (;;) {
      {
        absl::MutexLock l(&mu_);
        if (stopping_) return;
        const auto now = clock_();
        if (queue_.empty() || queue_.begin()->first > now) {
          // Wakes for the next due item or every 2 ms, whichever is first
          // (a Push does not signal: 2 ms is below any latency simulated).
          auto wake = now + std::chrono::milliseconds(2);
          if (!queue_.empty() && queue_.begin()->first < wake) wake = queue_.begin()->first;
          mu_.AwaitWithTimeout(absl::Condition(&stopping_), absl::FromChrono(wake - now));
          continue;
        }
      }
      DeliverDue();
    }
  }

  const std::function<void(T&)> deliver_;
  const std::function<Clock::time_point()> clock_;
  // Held from taking items out of the queue until they are delivered, so
  // that two deliveries never interleave (lock order: delivery_mu_, mu_).
  absl::Mutex delivery_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  absl::Mutex mu_;
  std::multimap<Clock::time_point, T> queue_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_TIMED_QUEUE_H_
