// The defaults of the step taken in halves (backend.h): the whole step in
// LaunchTrainStep, through TrainStep, on a copy of the staged batch.
#include "model/backend.h"

#include <limits>
#include <utility>

namespace reckon::model {

absl::Status Backend::StageBatch(std::span<const float> images, std::span<const int32_t> labels) {
  staged_rows_ = 0;
  if (labels.empty() || images.size() % labels.size() != 0) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", labels.size(), " labels and ",
                                                   images.size(),
                                                   " image values is not whole samples"));
  }
  if (labels.size() > size_t(std::numeric_limits<int>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("a batch of ", labels.size(), " samples"));
  }
  staged_images_.assign(images.begin(), images.end());
  staged_labels_.assign(labels.begin(), labels.end());
  staged_rows_ = static_cast<int>(labels.size());
  return absl::OkStatus();
}

absl::Status Backend::LaunchTrainStep(float learning_rate, Emission* out) {
  if (launched_) return absl::FailedPreconditionError("a step is launched and not yet finished");
  if (staged_rows_ == 0) return absl::FailedPreconditionError("no batch is staged for the step");
  const int rows = std::exchange(staged_rows_, 0);
  launched_result_ =
      TrainStep(staged_images_.data(), staged_labels_.data(), rows, learning_rate, out);
  launched_ = true;
  return absl::OkStatus();
}

absl::StatusOr<BatchStats> Backend::FinishTrainStep() {
  if (!launched_) return absl::FailedPreconditionError("no step was launched");
  launched_ = false;
  return std::move(launched_result_);
}

}  // namespace reckon::model
