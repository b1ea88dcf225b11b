// The wall clock as nanoseconds since the Unix epoch: what outlives a
// process (an incarnation, a message's emission time read on another
// machine). Durations within one process use the steady clock instead.
//
// Threads: any.
#ifndef RECKON_BASE_WALL_CLOCK_H_
#define RECKON_BASE_WALL_CLOCK_H_

#include <chrono>
#include <cstdint>

namespace reckon::base {

inline int64_t UnixNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace reckon::base

#endif  // RECKON_BASE_WALL_CLOCK_H_
