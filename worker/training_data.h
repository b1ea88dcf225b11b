// A worker's data, as its training loop reads it: the splits (IDX files, or
// a NumPy folder in memory or mapped: samples.h), each feature standardized
// by the training split's statistics (input(): the same numbers on every
// worker, which all read the same files), this worker's shard, the epoch's
// seeded order, the batch buffers filled from it (a mapped split asked to
// read the next batches ahead), the evaluation on the test split, and the
// auto batch search's judges.
//
// Threads: one thread (the training thread) calls every method. Errors:
// Load names what is wrong (data missing or malformed, a model that does
// not fit it, a shard smaller than a batch, flags that ask for more samples
// than the shard has).
#ifndef RECKON_WORKER_TRAINING_DATA_H_
#define RECKON_WORKER_TRAINING_DATA_H_

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "model/backend.h"
#include "model/model.h"
#include "worker/dataset.h"
#include "worker/samples.h"

namespace reckon::worker {

struct TrainerOptions;

class TrainingData {
 public:
  // The data of options.data_dir for `shape`, with batch buffers for
  // batches of up to `max_batch` samples.
  static absl::StatusOr<std::unique_ptr<TrainingData>> Load(const TrainerOptions& options,
                                                            const model::ModelShape& shape,
                                                            int max_batch);

  // What the model's inputs are of the raw features (kept in checkpoints,
  // so that exports take raw features).
  const InputTransform& input() const { return input_; }
  // This worker's training samples (indices into the training split).
  std::span<const uint32_t> shard() const { return shard_; }
  size_t shard_size() const { return shard_.size(); }
  const Samples& train() const { return *train_; }

  // Puts the shard in epoch `epoch`'s order: the same on every platform for
  // (seed, epoch).
  void OrderFor(int epoch);
  // Fills the batch buffers with the order's [first, first + batch), and
  // asks a mapped split for the batches after it (in memory: nothing).
  // Fails as Samples::Gather does (a mapped file cut since it was checked).
  absl::Status FillBatch(size_t first, int batch);
  std::span<const float> BatchImages(int batch) const {
    return std::span<const float>(batch_images_).first(size_t(batch) * size_t(features_));
  }
  std::span<const int32_t> BatchLabels(int batch) const {
    return std::span<const int32_t>(batch_labels_).first(size_t(batch));
  }

  // `backend`'s mean loss and accuracy on the test split's evaluation
  // samples (--eval-samples; all by default), in chunks of at most 64 MiB
  // of features (the same sums in memory or mapped).
  struct TestResult {
    double loss = 0;
    double accuracy = 0;
  };
  absl::StatusOr<TestResult> Evaluate(model::Backend& backend) const;
  size_t eval_count() const { return eval_count_; }

  // --auto-batch: fixed samples of the shard that judge the candidates
  // (empty without it).
  std::span<const float> judge_images() const { return judge_images_; }
  std::span<const int32_t> judge_labels() const { return judge_labels_; }

 private:
  TrainingData() = default;
  // A NumPy dataset folder (npy_dataset.h): checked against the model,
  // read, each feature standardized by the training split's statistics.
  absl::Status LoadNpy(const TrainerOptions& options, const model::ModelShape& shape);
  absl::Status LoadSplits(const TrainerOptions& options, const model::ModelShape& shape);
  absl::Status TakeShard(const TrainerOptions& options, int max_batch);
  absl::Status PickJudges(const TrainerOptions& options);

  // How many batches past the one being filled FillBatch asks a mapped
  // split to read ahead.
  static constexpr size_t kBatchesReadAhead = 8;

  int features_ = 0;
  uint64_t seed_ = 0;
  std::unique_ptr<Samples> train_, test_;
  InputTransform input_;
  std::vector<uint32_t> shard_;
  std::vector<uint32_t> order_;  // the shard, shuffled for the epoch
  // order_[read_ahead_from_ ..) is the batch FillBatch filled last, and
  // order_[.. read_ahead_until_) has been asked for.
  size_t read_ahead_from_ = 0, read_ahead_until_ = 0;
  size_t eval_count_ = 0;
  std::vector<float> batch_images_;
  std::vector<int32_t> batch_labels_;
  std::vector<float> judge_images_;
  std::vector<int32_t> judge_labels_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_TRAINING_DATA_H_
