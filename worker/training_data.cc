#include "worker/training_data.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "worker/dataset.h"
#include "worker/npy_dataset.h"
#include "worker/trainer.h"

namespace reckon::worker {

absl::StatusOr<std::unique_ptr<TrainingData>> TrainingData::Load(const TrainerOptions& options,
                                                                 const model::ModelShape& shape,
                                                                 int max_batch) {
  std::unique_ptr<TrainingData> data(new TrainingData());
  data->features_ = shape.inputs();
  data->seed_ = options.seed;
  RECKON_RETURN_IF_ERROR(data->LoadSplits(options, shape));
  RECKON_RETURN_IF_ERROR(data->TakeShard(options, max_batch));
  if (!options.auto_batch.empty()) RECKON_RETURN_IF_ERROR(data->PickJudges(options));
  return data;
}

absl::Status TrainingData::LoadSplits(const TrainerOptions& options,
                                      const model::ModelShape& shape) {
  if (IsNpyDataset(options.data_dir)) return LoadNpy(options, shape);
  RECKON_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(options.data_dir, "train"));
  RECKON_ASSIGN_OR_RETURN(Dataset test, LoadIdxDataset(options.data_dir, "t10k"));
  if (train.features() != shape.inputs() || test.features() != shape.inputs()) {
    return absl::InvalidArgumentError(absl::StrCat("the model takes ", shape.inputs(),
                                                   " inputs but the images have ", train.features(),
                                                   " pixels"));
  }
  input_ = TransformOf(ComputePixelStats(train), shape.inputs());
  Standardize(input_, &train);
  Standardize(input_, &test);
  train_ = std::make_unique<InMemorySamples>(std::move(train));
  test_ = std::make_unique<InMemorySamples>(std::move(test));
  return absl::OkStatus();
}

absl::Status TrainingData::LoadNpy(const TrainerOptions& options, const model::ModelShape& shape) {
  const std::string& dir = options.data_dir;
  RECKON_ASSIGN_OR_RETURN(const NpyDatasetShape data, InspectNpyDataset(dir));
  if (data.features != uint64_t(shape.inputs())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model takes ", shape.inputs(), " inputs (--layers) but ", dir, " has ", data.features,
        " features a sample: give --layers ", data.features, ",...,CLASSES"));
  }
  auto name_classes = [&](const absl::Status& s) {
    if (s.code() != absl::StatusCode::kDataLoss) return s;
    return absl::Status(s.code(), absl::StrCat(s.message(), " (the model, --layers, has ",
                                               shape.classes(), " classes)"));
  };
  if (options.data_in_memory) {
    absl::StatusOr<Dataset> train = LoadNpyDataset(data, "train", shape.classes());
    if (!train.ok()) return name_classes(train.status());
    absl::StatusOr<Dataset> test = LoadNpyDataset(data, "test", shape.classes());
    if (!test.ok()) return name_classes(test.status());
    // Each feature standardized by the training split's statistics: the
    // same numbers on every worker, which all read the same files.
    input_ = TransformOf(ComputeFeatureStats(*train));
    Standardize(input_, &*train);
    Standardize(input_, &*test);
    train_ = std::make_unique<InMemorySamples>(std::move(*train));
    test_ = std::make_unique<InMemorySamples>(std::move(*test));
    return absl::OkStatus();
  }
  // Mapped, read as the epochs ask (samples.h): checked and its statistics
  // taken in one pass each, the same numbers as in memory.
  MappedSplitScan scan;
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> train =
      MappedNpySamples::Open(data, "train", shape.classes(), &scan);
  if (!train.ok()) return name_classes(train.status());
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> test =
      MappedNpySamples::Open(data, "test", shape.classes());
  if (!test.ok()) return name_classes(test.status());
  input_ = TransformOf(scan.stats);
  (*train)->SetTransform(input_);
  (*test)->SetTransform(input_);
  train_ = std::move(*train);
  test_ = std::move(*test);
  return absl::OkStatus();
}

absl::Status TrainingData::TakeShard(const TrainerOptions& options, int max_batch) {
  RECKON_ASSIGN_OR_RETURN(
      shard_, ShardIndices(train_->size(), options.shard, options.shards, options.seed));
  if (shard_.size() < static_cast<size_t>(max_batch)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", options.shard, "/", options.shards, " has ", shard_.size(),
                     " samples, fewer than one batch of ", max_batch));
  }
  if (options.pretrain_samples < 0 || size_t(options.pretrain_samples) > shard_.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pretrain-samples ", options.pretrain_samples, ": shard ", options.shard, "/",
        options.shards, " has ", shard_.size(), " samples (give 0 to ", shard_.size(), ")"));
  }
  order_ = shard_;
  eval_count_ = options.eval_samples > 0 ? std::min<size_t>(options.eval_samples, test_->size())
                                         : test_->size();
  batch_images_.resize(size_t(max_batch) * size_t(features_));
  batch_labels_.resize(size_t(max_batch));
  return absl::OkStatus();
}

absl::Status TrainingData::PickJudges(const TrainerOptions& options) {
  if (shard_.size() < static_cast<size_t>(options.auto_batch_samples)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--auto-batch-samples ", options.auto_batch_samples, ": shard ", options.shard,
                     "/", options.shards, " has only ", shard_.size(), " samples"));
  }
  // The judges: a fixed seeded draw from this worker's shard, the same for
  // every selection (Seide judges by training-set accuracy).
  std::vector<uint32_t> judges = shard_;
  SeededShuffle(judges, options.seed * 0xD1B54A32D192ED03ull + 0x5EEDull);
  judges.resize(std::min<size_t>(judges.size(), options.auto_batch_eval));
  judge_images_.resize(judges.size() * size_t(features_));
  judge_labels_.resize(judges.size());
  return train_->Gather(judges, judge_images_.data(), judge_labels_.data());
}

void TrainingData::OrderFor(int epoch) {
  std::copy(shard_.begin(), shard_.end(), order_.begin());
  SeededShuffle(order_, seed_ * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(epoch));
}

absl::Status TrainingData::FillBatch(size_t first, int batch) {
  const std::span<const uint32_t> order(order_);
  RECKON_RETURN_IF_ERROR(train_->Gather(order.subspan(first, size_t(batch)), batch_images_.data(),
                                        batch_labels_.data()));
  // The batches after this one, read ahead while it trains (a mapped
  // dataset; in memory, nothing to do): each row asked for once, as it
  // comes within kBatchesReadAhead batches. A new epoch (or a resume)
  // starts again where it begins.
  const size_t end = first + size_t(batch);
  if (first < read_ahead_from_ || read_ahead_until_ < end) read_ahead_until_ = end;
  read_ahead_from_ = first;
  const size_t ahead = std::min(order.size(), end + size_t(batch) * kBatchesReadAhead);
  if (read_ahead_until_ < ahead) {
    train_->WillNeed(order.subspan(read_ahead_until_, ahead - read_ahead_until_));
    read_ahead_until_ = ahead;
  }
  return absl::OkStatus();
}

absl::StatusOr<TrainingData::TestResult> TrainingData::Evaluate(model::Backend& backend) const {
  // In chunks of at most 64 MiB of features, whether the test split is in
  // memory or mapped (the same sums either way); Fashion-MNIST's is one.
  const size_t width = static_cast<size_t>(features_);
  const size_t chunk = std::max<size_t>(1, (size_t{64} << 20) / (sizeof(float) * width));
  std::vector<float> images(std::min(chunk, eval_count_) * width);
  std::vector<int32_t> labels(std::min(chunk, eval_count_));
  int64_t correct = 0;
  double loss_sum = 0;
  for (size_t first = 0; first < eval_count_; first += chunk) {
    const size_t count = std::min(chunk, eval_count_ - first);
    RECKON_RETURN_IF_ERROR(test_->Range(first, count, images.data(), labels.data()));
    RECKON_ASSIGN_OR_RETURN(const model::BatchStats eval,
                            backend.Evaluate(images.data(), labels.data(), count));
    correct += eval.correct;
    loss_sum += eval.loss_sum;
  }
  return TestResult{loss_sum / eval_count_, double(correct) / eval_count_};
}

}  // namespace reckon::worker
