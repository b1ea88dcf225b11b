// Automatic minibatch-size selection (TrainerOptions::auto_batch; Seide
// 2014 section 4; docs/training.md): at the start of an epoch, one trial per
// candidate size from this worker's replica, judged by accuracy on fixed
// training samples (TrainingData's judges); the largest candidate within
// the tolerance of the best is the epoch's batch.
//
// Threads: the training thread. Errors: a backend's (trials run on backends
// of their own, made as the worker's is), and kCancelled when the stop flag
// is set inside a trial (nothing of the run changed).
#ifndef RECKON_WORKER_BATCH_SIZE_SEARCH_H_
#define RECKON_WORKER_BATCH_SIZE_SEARCH_H_

#include <functional>
#include <ostream>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/fixed_point.h"
#include "model/backend.h"
#include "worker/training_data.h"

namespace reckon::worker {

struct TrainerOptions;

// The auto-batch options (TrainerOptions::auto_batch...) each checked, with
// an error naming the flag; Trainer::Create checks them too.
absl::Status CheckAutoBatchOptions(const TrainerOptions& options);

class BatchSizeSearch {
 public:
  // `options` (its auto_batch fields, backend, wrap_backend and stop) and
  // `config` (the worker's backend configuration, sized for the largest
  // candidate) outlive this object, as do `data` and `log`.
  BatchSizeSearch(const TrainerOptions& options, const model::BackendConfig& config,
                  TrainingData& data, std::ostream& log);

  // The batch size for epoch `epoch`, trying each candidate from `from`'s
  // replica, residual and optimizer state at tau `step` and `momentum`;
  // `learning_rate` gives a step's rate for a batch size. Logs what each
  // candidate reached. `from` is not changed.
  absl::StatusOr<int> Choose(int epoch, const model::Backend& from,
                             const codec::ThresholdStep& step, double momentum,
                             const std::function<float(int batch)>& learning_rate);

 private:
  struct From {
    std::vector<int64_t> weights;
    std::vector<float> residual, optimizer_state;
    codec::ThresholdStep step;
    double momentum = 0;
  };
  absl::StatusOr<double> Try(int epoch, int batch, const From& from, float learning_rate);

  const TrainerOptions& options_;
  const model::BackendConfig& config_;
  TrainingData& data_;
  std::ostream& log_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_BATCH_SIZE_SEARCH_H_
