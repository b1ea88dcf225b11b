#include "worker/epoch_plan.h"

#include <algorithm>

#include "worker/dataset.h"
#include "worker/trainer.h"

namespace reckon::worker {

absl::Status CheckWarmupBatchOptions(const TrainerOptions& options) {
  if (options.warmup_batch < 0 || !(options.warmup_fraction > 0 && options.warmup_fraction <= 1)) {
    return absl::InvalidArgumentError(
        "--warmup-batch must be >= 0 and --warmup-fraction in (0, 1]");
  }
  return absl::OkStatus();
}

uint64_t WarmupMessages(const TrainerOptions& options, size_t train_count) {
  const size_t batch =
      static_cast<size_t>(options.warmup_batch > 0 ? options.warmup_batch : options.batch);
  uint64_t messages = options.pretrain_samples > 0 ? 1 : 0;
  for (int shard = 0; shard < options.start_workers; ++shard) {
    const size_t size = ShardSize(train_count, shard, options.shards);
    messages += static_cast<size_t>(options.warmup_fraction * double(size)) / batch;
  }
  return std::max<uint64_t>(1, messages);
}

EpochPlan::EpochPlan(const TrainerOptions& options, size_t shard_size)
    : shard_size_(shard_size),
      warmup_batch_(options.warmup_batch),
      warmup_fraction_(options.warmup_fraction),
      // A worker that joins after the warm-up (--start-workers) has no ramp.
      ramps_(options.start_workers == 0 || options.shard < options.start_workers) {}

EpochPlan::Layout EpochPlan::Of(int epoch, int batch) const {
  Layout layout;
  const size_t warmup_batch = static_cast<size_t>(warmup_batch_);
  if (epoch == 0 && warmup_batch > 0 && ramps_) {
    layout.ramp_steps = static_cast<size_t>(warmup_fraction_ * double(shard_size_)) / warmup_batch;
  }
  layout.ramp_samples = layout.ramp_steps * warmup_batch;
  layout.steps =
      layout.ramp_steps + (shard_size_ - layout.ramp_samples) / static_cast<size_t>(batch);
  return layout;
}

int EpochPlan::BatchAt(int epoch, size_t position, int batch) const {
  const int size = position < Of(epoch, batch).ramp_samples ? warmup_batch_ : batch;
  return position + size_t(size) > shard_size_ ? 0 : size;
}

EpochPlan::Position EpochPlan::After(uint64_t steps, int epochs, int batch) const {
  uint64_t left = steps;
  Position at;
  for (; at.epoch < epochs; ++at.epoch) {
    const Layout layout = Of(at.epoch, batch);
    if (left < layout.steps) break;
    left -= layout.steps;
  }
  if (at.epoch < epochs) {
    const Layout layout = Of(at.epoch, batch);
    at.sample = left < layout.ramp_steps
                    ? size_t(left) * size_t(warmup_batch_)
                    : layout.ramp_samples + size_t(left - layout.ramp_steps) * size_t(batch);
  }
  return at;
}

}  // namespace reckon::worker
