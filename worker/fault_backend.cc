#include "worker/fault_backend.h"

#include <optional>
#include <thread>

#include "base/status_macros.h"
#include "model/forwarding_backend.h"

namespace reckon::worker {
namespace {

class CorruptingBackend final : public model::ForwardingBackend {
 public:
  CorruptingBackend(std::unique_ptr<model::Backend> real, uint64_t step, std::ostream& log)
      : ForwardingBackend(std::move(real)), strike_at_(step), log_(&log) {}

  absl::StatusOr<model::BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                              float learning_rate, model::Emission* out) override {
    if (++steps_ == strike_at_) {
      RECKON_ASSIGN_OR_RETURN(std::vector<int64_t> weights, real().ReadWeights());
      weights[weights.size() / 2] += 1;
      RECKON_RETURN_IF_ERROR(real().LoadWeights(weights));
      *log_ << "reckon-worker: TEST FAULT: one quantum added to weight " << weights.size() / 2
            << " of the training replica before step " << steps_ << "\n"
            << std::flush;
    }
    return real().TrainStep(images, labels, batch, learning_rate, out);
  }

 private:
  const uint64_t strike_at_;
  uint64_t steps_ = 0;
  std::ostream* log_;
};

// Sleeps before a step until `min_step_` has passed since the last one
// started: a floor on each step's time, whatever the machine, so that N
// steps take at least N * min_step.
class SlowStepBackend final : public model::ForwardingBackend {
 public:
  SlowStepBackend(std::unique_ptr<model::Backend> real, std::chrono::microseconds min_step)
      : ForwardingBackend(std::move(real)), min_step_(min_step) {}

  absl::StatusOr<model::BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                              float learning_rate, model::Emission* out) override {
    if (last_start_) std::this_thread::sleep_until(*last_start_ + min_step_);
    last_start_ = std::chrono::steady_clock::now();
    return real().TrainStep(images, labels, batch, learning_rate, out);
  }

 private:
  const std::chrono::microseconds min_step_;
  std::optional<std::chrono::steady_clock::time_point> last_start_;
};

}  // namespace

std::unique_ptr<model::Backend> WithWeightCorruption(std::unique_ptr<model::Backend> real,
                                                     uint64_t step, std::ostream& log) {
  return std::make_unique<CorruptingBackend>(std::move(real), step, log);
}

std::unique_ptr<model::Backend> WithSlowSteps(std::unique_ptr<model::Backend> real,
                                              std::chrono::microseconds min_step) {
  return std::make_unique<SlowStepBackend>(std::move(real), min_step);
}

}  // namespace reckon::worker
