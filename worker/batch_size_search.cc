#include "worker/batch_size_search.h"

#include <algorithm>
#include <memory>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "worker/backend_factory.h"
#include "worker/trainer.h"

namespace reckon::worker {

absl::Status CheckAutoBatchOptions(const TrainerOptions& options) {
  const std::vector<int>& sizes = options.auto_batch;
  if (sizes.empty()) return absl::OkStatus();
  if (sizes.front() < 1 || !std::is_sorted(sizes.begin(), sizes.end()) ||
      std::adjacent_find(sizes.begin(), sizes.end()) != sizes.end()) {
    return absl::InvalidArgumentError(
        "--auto-batch: the candidate sizes must be >= 1 and strictly ascending");
  }
  if (options.auto_batch_every < 1) {
    return absl::InvalidArgumentError("--auto-batch-every must be >= 1");
  }
  if (options.auto_batch_eval < 1) {
    return absl::InvalidArgumentError("--auto-batch-eval must be >= 1");
  }
  if (!(options.auto_batch_tolerance >= 0)) {
    return absl::InvalidArgumentError("--auto-batch-tolerance must be >= 0");
  }
  if (!(options.auto_batch_lr_power >= 0 && options.auto_batch_lr_power <= 1)) {
    return absl::InvalidArgumentError("--auto-batch-lr-power must be in [0, 1]");
  }
  if (options.auto_batch_samples < sizes.back()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auto-batch-samples ", options.auto_batch_samples,
                     " must be at least the largest candidate (", sizes.back(),
                     ") so that every candidate takes a step"));
  }
  return absl::OkStatus();
}

BatchSizeSearch::BatchSizeSearch(const TrainerOptions& options, const model::BackendConfig& config,
                                 TrainingData& data, std::ostream& log)
    : options_(options), config_(config), data_(data), log_(log) {}

// Seide 2014 section 4: "process the next [slice] at different minibatch
// sizes and pick the largest N that does not hurt convergence, based on
// training-set frame accuracy". Each candidate trains a fresh backend from
// this worker's replica, residual and optimizer state on the first
// auto_batch_samples of this epoch's order (which the epoch then trains on
// as usual), applying its own emissions to itself only: nothing reaches the
// peers, so the replicas cannot fork, and peers' messages wait in the inbox.
// A fresh backend per candidate leaves this one's state (codec, aggregate
// AdaGrad) untouched, and makes a resumed run choose as the uninterrupted one.
absl::StatusOr<int> BatchSizeSearch::Choose(int epoch, const model::Backend& backend,
                                            const codec::ThresholdStep& step, double momentum,
                                            const std::function<float(int batch)>& learning_rate) {
  From from;
  RECKON_ASSIGN_OR_RETURN(from.weights, backend.ReadWeights());
  RECKON_ASSIGN_OR_RETURN(from.residual, backend.ReadResidual());
  RECKON_ASSIGN_OR_RETURN(from.optimizer_state, backend.ReadOptimizerState());
  from.step = step;
  from.momentum = momentum;
  std::vector<std::pair<int, double>> tried;
  double best = -1;
  for (const int candidate : options_.auto_batch) {
    RECKON_ASSIGN_OR_RETURN(const double accuracy,
                            Try(epoch, candidate, from, learning_rate(candidate)));
    tried.emplace_back(candidate, accuracy);
    best = std::max(best, accuracy);
  }
  int chosen = options_.auto_batch.front();
  for (const auto& [candidate, accuracy] : tried) {
    if (accuracy >= best - options_.auto_batch_tolerance) chosen = candidate;
  }
  std::string line = absl::StrFormat(
      "reckon-worker: epoch %d batch by accuracy on %zu training samples after %d:", epoch + 1,
      data_.judge_labels().size(), static_cast<int>(options_.auto_batch_samples));
  for (const auto& [candidate, accuracy] : tried) {
    absl::StrAppendFormat(&line, " %d %.2f%%", candidate, 100 * accuracy);
  }
  log_ << line << " -> batch " << chosen << "\n";
  return chosen;
}

// One candidate's trial: its accuracy on the judges, or 0 when the trial
// diverged (a residual of NaN: that size hurts convergence by definition).
absl::StatusOr<double> BatchSizeSearch::Try(int epoch, int batch, const From& from,
                                            float learning_rate) {
  std::string chosen;
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> trial,
                          MakeBackend(options_.backend, config_, &chosen));
  if (options_.wrap_backend) trial = options_.wrap_backend(std::move(trial));
  RECKON_RETURN_IF_ERROR(trial->LoadWeights(from.weights));
  RECKON_RETURN_IF_ERROR(trial->LoadTrainingState(from.residual, from.optimizer_state));
  trial->SetThresholdStep(from.step);
  trial->SetMomentum(from.momentum);
  model::Emission out;
  const int64_t steps = options_.auto_batch_samples / batch;
  for (int64_t k = 0; k < steps; ++k) {
    if (options_.stop != nullptr && options_.stop->load()) {
      return absl::CancelledError(absl::StrCat(base::StoppedBySignal(), " while trying batch size ",
                                               batch, " for epoch ", epoch + 1));
    }
    RECKON_RETURN_IF_ERROR(data_.FillBatch(size_t(k) * batch, batch));
    absl::StatusOr<model::BatchStats> stats =
        trial->TrainStep(data_.BatchImages(batch).data(), data_.BatchLabels(batch).data(), batch,
                         learning_rate, &out);
    if (stats.status().code() == absl::StatusCode::kInvalidArgument) return 0.0;  // diverged
    RECKON_RETURN_IF_ERROR(stats.status());
    RECKON_RETURN_IF_ERROR(config_.mode == model::UpdateMode::kThreshold
                               ? trial->ApplyUpdates(from.step.step_quanta, out.words)
                               : trial->ApplyDense(out.quanta()));
  }
  RECKON_ASSIGN_OR_RETURN(const model::BatchStats judged,
                          trial->Evaluate(data_.judge_images().data(), data_.judge_labels().data(),
                                          data_.judge_labels().size()));
  return double(judged.correct) / double(data_.judge_labels().size());
}

}  // namespace reckon::worker
