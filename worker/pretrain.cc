#include "worker/pretrain.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/stop_signals.h"
#include "worker/backend_factory.h"

namespace reckon::worker {
namespace {

// The shape of stage `k` (1-based): the model's input, its first k hidden
// widths, and its classes.
absl::StatusOr<model::ModelShape> StageShape(const model::ModelShape& full, size_t k) {
  const std::vector<int>& sizes = full.sizes();
  std::vector<int> stage(sizes.begin(), sizes.begin() + static_cast<std::ptrdiff_t>(k) + 1);
  stage.push_back(full.classes());
  return model::ModelShape::Parse(
      absl::StrJoin(stage, ","),
      full.activation() == model::Activation::kRelu ? "relu" : "sigmoid");
}

// One pass of `backend` over `samples`; the mean loss and the fraction
// classified right, as the steps saw them.
absl::StatusOr<std::pair<double, double>> TrainOnePass(const PretrainOptions& options,
                                                       model::Backend& backend,
                                                       const Samples& train,
                                                       std::span<const uint32_t> samples) {
  const size_t features = static_cast<size_t>(train.features());
  const int batch = options.batch;
  std::vector<float> images(size_t(batch) * features);
  std::vector<int32_t> labels(batch);
  model::OptimizerConfig rate = options.config.optimizer;
  rate.learning_rate = options.learning_rate;
  rate.schedule = model::Schedule::kConstant;
  model::Emission emission;
  double loss = 0;
  int64_t correct = 0, seen = 0;
  const int64_t steps = static_cast<int64_t>(samples.size()) / batch;
  for (int64_t step = 0; step < steps; ++step) {
    if (options.stop != nullptr && options.stop->load()) {
      return absl::CancelledError(
          absl::StrCat(base::StoppedBySignal(), " after ", step, " of ", steps, " steps"));
    }
    RECKON_RETURN_IF_ERROR(train.Gather(samples.subspan(size_t(step) * batch, size_t(batch)),
                                        images.data(), labels.data()));
    RECKON_ASSIGN_OR_RETURN(const model::BatchStats stats,
                            backend.TrainStepLocally(
                                images.data(), labels.data(), batch,
                                static_cast<float>(model::LearningRate(rate, 0, step)), &emission));
    loss += stats.loss_sum;
    correct += stats.correct;
    seen += batch;
  }
  return std::make_pair(loss / double(seen), double(correct) / double(seen));
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> PretrainLayerwise(const PretrainOptions& options,
                                                       const Samples& train,
                                                       std::span<const uint32_t> samples,
                                                       std::ostream& log) {
  const model::ModelShape& full = options.config.shape;
  const size_t hidden = full.layers().size() - 1;
  if (hidden == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pretrain-samples: the model ", full.ToString(), " has no hidden layer to pre-train"));
  }
  if (options.batch < 1 || samples.size() < static_cast<size_t>(options.batch)) {
    return absl::InvalidArgumentError(absl::StrCat("--pretrain-samples: ", samples.size(),
                                                   " samples are less than a batch of ",
                                                   options.batch));
  }
  const int fraction_bits = options.config.fraction_bits;
  std::vector<int64_t> below;  // the trained hidden layers so far: a prefix
  for (size_t k = 1; k <= hidden; ++k) {
    RECKON_ASSIGN_OR_RETURN(const model::ModelShape stage, StageShape(full, k));
    RECKON_ASSIGN_OR_RETURN(std::vector<int64_t> weights,
                            model::InitialWeights(stage, fraction_bits, options.seed));
    std::copy(below.begin(), below.end(), weights.begin());
    model::BackendConfig config = options.config;
    config.shape = stage;
    config.mode = model::UpdateMode::kCodec;
    config.codec.codec = v1::CODEC_DENSE_FP32;
    config.codec.error_feedback = true;
    config.max_batch = options.batch;
    std::string chosen;
    RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> backend,
                            MakeBackend(options.backend, config, &chosen));
    if (options.wrap_backend) backend = options.wrap_backend(std::move(backend));
    RECKON_RETURN_IF_ERROR(backend->LoadWeights(weights));
    absl::StatusOr<std::pair<double, double>> pass =
        TrainOnePass(options, *backend, train, samples);
    if (!pass.ok()) {
      return absl::Status(pass.status().code(),
                          absl::StrCat("pre-training stage ", k, " (", stage.ToString(),
                                       "): ", pass.status().message()));
    }
    log << absl::StrFormat(
        "reckon-worker: pre-training stage %zu of %zu (%s): %zu samples, loss %.4f, training "
        "accuracy %.2f%%\n",
        k, hidden, stage.ToString(), samples.size() / options.batch * options.batch, pass->first,
        100 * pass->second);
    RECKON_ASSIGN_OR_RETURN(weights, backend->ReadWeights());
    // Hidden layers 1 .. k: everything before the stage's output layer.
    below.assign(weights.begin(),
                 weights.begin() + static_cast<std::ptrdiff_t>(stage.layers()[k].weights));
    if (k == hidden) return weights;
  }
  return absl::InternalError("unreachable");
}

}  // namespace reckon::worker
