// reckon-worker's training flags: the model and optimizer, the schedule,
// the data, the compression, the compute and the output (docs/flags.md).
// They are defined in training_flags.cc; worker/daemon_flags.h gathers them
// with the member's flags for the daemon.
//
// Threads: the main thread, once, after the flags are parsed.
#ifndef RECKON_WORKER_TRAINING_FLAGS_H_
#define RECKON_WORKER_TRAINING_FLAGS_H_

#include "absl/status/statusor.h"
#include "worker/trainer.h"

namespace reckon::worker {

// The file that defines the training flags (base::FlagScope::FromFile).
inline constexpr char kTrainingFlagsFile[] = "worker/training_flags.cc";

// The training flags read and checked. kInvalidArgument naming the flag
// that does not fit.
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags();

}  // namespace reckon::worker

#endif  // RECKON_WORKER_TRAINING_FLAGS_H_
