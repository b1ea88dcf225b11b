#include "server/anti_entropy.h"

#include <algorithm>

namespace reckon::server {

RepairPlan PlanRepair(uint64_t ours, uint64_t theirs, uint64_t pushed, uint64_t first_retained,
                      bool resync_told) {
  const uint64_t from = std::max(theirs, pushed);
  if (from >= ours || first_retained == 0) return {};
  if (first_retained > from + 1) {
    // The next seq it needs is gone from our log. Only what it has applied
    // counts here: what we pushed may still fill the gap.
    if (theirs < first_retained - 1 && !resync_told) {
      return {RepairPlan::kResync, first_retained, 0};
    }
    return {};
  }
  return {RepairPlan::kSend, from + 1, ours};
}

Clock::duration RelayDelay(bool own, bool origin_alive, std::chrono::milliseconds repair_timeout,
                           std::chrono::milliseconds failure_timeout) {
  if (own) return Clock::duration::zero();
  return origin_alive ? std::max(repair_timeout, failure_timeout) : repair_timeout;
}

}  // namespace reckon::server
