#include "worker/density_controller.h"

#include <algorithm>
#include <cmath>

#include "absl/status/statusor.h"

namespace reckon::worker {

codec::ThresholdStep DensityController::Next(const codec::ThresholdStep& step, size_t emitted) {
  average_ += kSmoothing * (double(emitted) / double(params_) - average_);
  const double observed = std::max(average_, target_ / 10);
  const double factor = std::clamp(std::exp(kGain * std::log(observed / target_)), 0.5, 2.0);
  absl::StatusOr<codec::ThresholdStep> next =
      codec::MakeThresholdStep(double(step.tau) * factor, step.fraction_bits);
  return next.ok() ? *next : step;
}

}  // namespace reckon::worker
