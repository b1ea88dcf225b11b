// A Backend that forwards every call to another: the base of wrappers that
// change one behaviour of a real backend (a test fault, a stop injected at a
// step) and leave the rest to it. Same threading as the wrapped backend.
#ifndef RECKON_MODEL_FORWARDING_BACKEND_H_
#define RECKON_MODEL_FORWARDING_BACKEND_H_

#include <memory>
#include <utility>

#include "model/backend.h"

namespace reckon::model {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> real) : real_(std::move(real)) {}

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
  absl::StatusOr<codec::CodecState> ReadCodecState() const override {
    return real_->ReadCodecState();
  }
  absl::Status LoadCodecState(const codec::CodecState& state) override {
    return real_->LoadCodecState(state);
  }
  absl::StatusOr<BatchStats> TrainStep(const float* images, const int32_t* labels, int batch,
                                       float learning_rate, Emission* out) override {
    return real_->TrainStep(images, labels, batch, learning_rate, out);
  }
  // The step in halves (StageBatch, LaunchTrainStep, FinishTrainStep) is
  // not forwarded: Backend's defaults take it through TrainStep above, so
  // a wrapper that overrides TrainStep sees every step.
  void SetMomentum(double momentum) override { real_->SetMomentum(momentum); }
  void SetThresholdStep(const codec::ThresholdStep& step) override {
    real_->SetThresholdStep(step);
  }
  uint64_t WeightsWrapped() const override { return real_->WeightsWrapped(); }
  absl::Status ApplyUpdates(int64_t step_quanta, std::span<const uint32_t> words) override {
    return real_->ApplyUpdates(step_quanta, words);
  }
  absl::Status ApplyOwnEmission(int64_t step_quanta, std::span<const uint32_t> words) override {
    return real_->ApplyOwnEmission(step_quanta, words);
  }
  absl::Status ApplyUpdateBatch(std::span<const UpdateRef> updates) override {
    return real_->ApplyUpdateBatch(updates);
  }
  absl::Status ApplyDense(codec::QuantaSpan quanta) override { return real_->ApplyDense(quanta); }
  absl::Status ApplyCheckedDense(const v1::Update& msg) override {
    return real_->ApplyCheckedDense(msg);
  }
  codec::ParallelFor HostThreads() override { return real_->HostThreads(); }
  absl::StatusOr<BatchStats> Evaluate(const float* images, const int32_t* labels,
                                      size_t count) override {
    return real_->Evaluate(images, labels, count);
  }

 protected:
  Backend& real() { return *real_; }
  const Backend& real() const { return *real_; }

 private:
  std::unique_ptr<Backend> real_;
};

}  // namespace reckon::model

#endif  // RECKON_MODEL_FORWARDING_BACKEND_H_
