// How a worker's epochs are cut into steps (docs/training.md): the first
// epoch's ramp (Strom 2015 Table 1: the first `warmup_fraction` of the
// shard in steps of `warmup_batch`; none for a worker that starts after
// the warm-up, --start-workers), then steps of the batch size in force; a
// batch that would run past the shard's end is not taken. And where a
// member restarted after its earlier lives published N steps goes on.
//
// Threads: immutable once made; any thread. Pure arithmetic: no errors.
#ifndef RECKON_WORKER_EPOCH_PLAN_H_
#define RECKON_WORKER_EPOCH_PLAN_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"

namespace reckon::worker {

struct TrainerOptions;

// The first-epoch ramp's options (TrainerOptions::warmup_batch, ...).
absl::Status CheckWarmupBatchOptions(const TrainerOptions& options);
// With --start-workers: the messages the cluster has published once its
// starting workers (shards 0 .. start_workers - 1 of `train_count` samples)
// have each trained the warm-up, floor(warmup_fraction x its shard) / B
// steps, B the ramp's minibatch (warmup_batch, else batch), plus the
// pre-trained start; at least 1. The others join after that many
// (PeerOptions::join_after_messages).
uint64_t WarmupMessages(const TrainerOptions& options, size_t train_count);

class EpochPlan {
 public:
  // `options`: its shard, start_workers, warmup_batch and warmup_fraction;
  // `shard_size`: this worker's samples.
  EpochPlan(const TrainerOptions& options, size_t shard_size);

  struct Layout {
    size_t ramp_steps = 0, ramp_samples = 0, steps = 0;
  };
  // Epoch `epoch` at batch size `batch` (after the ramp).
  Layout Of(int epoch, int batch) const;
  // The size of the step at `position` of epoch `epoch`'s order (the ramp's
  // or `batch`), or 0 when no whole batch is left there.
  int BatchAt(int epoch, size_t position, int batch) const;

  // Where the step after `steps` steps stands, every epoch at `batch`:
  // its epoch (`epochs` when every epoch is done) and its sample.
  struct Position {
    int epoch = 0;
    size_t sample = 0;
  };
  Position After(uint64_t steps, int epochs, int batch) const;

 private:
  const size_t shard_size_;
  const int warmup_batch_;
  const double warmup_fraction_;
  // This worker trains the ramp (not one that starts after the warm-up).
  const bool ramps_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_EPOCH_PLAN_H_
