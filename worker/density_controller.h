// Steers tau toward a target update density (docs/design.md step 5), so the
// wire budget is set directly and emission does not dry up as the learning
// rate decays.
//
// Threads: not thread-safe; the training thread owns one. Errors: none
// (where the fixed-point grid cannot represent the change, the step stays).
#ifndef RECKON_WORKER_DENSITY_CONTROLLER_H_
#define RECKON_WORKER_DENSITY_CONTROLLER_H_

#include <cstddef>
#include <cstdint>

#include "codec/fixed_point.h"

namespace reckon::worker {

// Emission is bursty (a lowered tau releases many residuals at once, then few
// for a while), so the controller acts on a moving average of the density
// over about 20 steps, with a small step in log space each training step.
// Deterministic (counts only): replicas trained with the same seed stay
// identical, and a resumed run given the checkpointed average continues the
// same trajectory.
class DensityController {
 public:
  DensityController(double target, uint64_t params)
      : target_(target), params_(params), average_(target) {}
  // The step to use next, after one that emitted `emitted` updates; the
  // current one where the grid cannot represent the change.
  codec::ThresholdStep Next(const codec::ThresholdStep& step, size_t emitted);
  double average() const { return average_; }
  void set_average(double average) { average_ = average; }

 private:
  static constexpr double kSmoothing = 0.05;
  static constexpr double kGain = 0.05;
  double target_;
  uint64_t params_;
  double average_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_DENSITY_CONTROLLER_H_
