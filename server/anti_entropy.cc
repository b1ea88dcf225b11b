#include "server/anti_entropy.h"

#include <algorithm>

namespace reckon::server {

RepairPlan PlanRepair(uint64_t ours, uint64_t theirs, uint64_t pushed, uint64_t first_retained,
                      bool rejoin_told) {
  const uint64_t from = std::max(theirs, pushed);
  if (from >= ours || first_retained == 0) return {};
  if (first_retained > from + 1) {
    // The next seq it needs is gone from our log. Only what it has applied
    // counts here: what we pushed may still fill the gap.
    if (theirs < first_retained - 1 && !rejoin_told) {
      return {RepairPlan::kRejoin, first_retained, 0};
    }
    return {};
  }
  return {RepairPlan::kSend, from + 1, ours};
}

bool MayRelay(bool own, bool origin_alive, bool member_hears_origin, Clock::duration age,
              Clock::duration heard_for, std::chrono::milliseconds repair_timeout,
              std::chrono::milliseconds failure_timeout) {
  if (own) return true;
  if (!origin_alive) return age >= repair_timeout;
  return !member_hears_origin && age >= failure_timeout && heard_for >= failure_timeout;
}

bool MayRelayInTree(bool tree_child, bool own, bool origin_alive, bool member_hears_origin,
                    Clock::duration age, Clock::duration heard_for,
                    std::chrono::milliseconds repair_timeout,
                    std::chrono::milliseconds failure_timeout) {
  if (tree_child) return true;
  if (own) return age >= failure_timeout && heard_for >= failure_timeout;
  return MayRelay(false, origin_alive, member_hears_origin, age, heard_for, repair_timeout,
                  failure_timeout);
}

}  // namespace reckon::server
