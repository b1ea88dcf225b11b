#include "worker/fault_backend.h"

#include "base/status_macros.h"

namespace reckon::worker {
namespace {

class CorruptingBackend final : public model::Backend {
 public:
  CorruptingBackend(std::unique_ptr<model::Backend> real, uint64_t step, std::ostream& log)
      : real_(std::move(real)), strike_at_(step), log_(&log) {}

  std::string Describe() const override { return real_->Describe(); }
  absl::Status LoadWeights(std::span<const int64_t> quanta) override {
    return real_->LoadWeights(quanta);
  }
  absl::StatusOr<std::vector<int64_t>> ReadWeights() const override { return real_->ReadWeights(); }
  absl::StatusOr<std::string> WeightHash() const override { return real_->WeightHash(); }
  absl::StatusOr<uint64_t> Checksum(const codec::WeightChecksum& checksum) const override {
    return real_->Checksum(checksum);
  }
  absl::StatusOr<std::vector<float>> ReadResidual() const override { return real_->ReadResidual(); }
  absl::StatusOr<std::vector<float>> ReadOptimizerState() const override {
    return real_->ReadOptimizerState();
  }
  absl::Status LoadTrainingState(std::span<const float> residual,
                                 std::span<const float> optimizer_state) override {
    return real_->LoadTrainingState(residual, optimizer_state);
  }
  absl::StatusOr<model::BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                              float learning_rate, model::Emission* out) override {
    if (++steps_ == strike_at_) {
      RECKON_ASSIGN_OR_RETURN(std::vector<int64_t> weights, real_->ReadWeights());
      weights[weights.size() / 2] += 1;
      RECKON_RETURN_IF_ERROR(real_->LoadWeights(weights));
      *log_ << "reckon-worker: TEST FAULT: one quantum added to weight " << weights.size() / 2
            << " of the training replica before step " << steps_ << "\n"
            << std::flush;
    }
    return real_->TrainStep(images, labels, batch, learning_rate, out);
  }
  void SetMomentum(double momentum) override { real_->SetMomentum(momentum); }
  void SetThresholdStep(const codec::ThresholdStep& step) override {
    real_->SetThresholdStep(step);
  }
  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    return real_->ApplyUpdates(step_quanta, words);
  }
  absl::Status ApplyUpdateBatch(std::span<const model::UpdateRef> updates) override {
    return real_->ApplyUpdateBatch(updates);
  }
  absl::Status ApplyDense(std::span<const int64_t> quanta) override {
    return real_->ApplyDense(quanta);
  }
  absl::StatusOr<model::BatchStats> Evaluate(const float* images, const int32_t* labels,
                                             size_t count) override {
    return real_->Evaluate(images, labels, count);
  }

 private:
  std::unique_ptr<model::Backend> real_;
  const uint64_t strike_at_;
  uint64_t steps_ = 0;
  std::ostream* log_;
};

}  // namespace

std::unique_ptr<model::Backend> WithWeightCorruption(std::unique_ptr<model::Backend> real,
                                                     uint64_t step, std::ostream& log) {
  return std::make_unique<CorruptingBackend>(std::move(real), step, log);
}

}  // namespace reckon::worker
