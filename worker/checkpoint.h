// Checkpoints: fixed-point weights, residual, optimizer state and progress,
// with the configuration they belong to, in a file guarded by a SHA-256
// checksum. The file is "RECKONCK", the 32-byte SHA-256 of the body, then
// the body: a serialized v1::Checkpoint (proto/reckon.proto), whose arrays are
// little-endian.
#ifndef RECKON_WORKER_CHECKPOINT_H_
#define RECKON_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"

namespace reckon::worker {

// The configuration a checkpoint belongs to. Resuming under any other is
// refused, naming the field that differs.
struct CheckpointIdentity {
  std::string model;      // ModelShape::ToString()
  int fraction_bits = 0;
  uint64_t seed = 0;
  std::string optimizer;  // sgd | momentum | adagrad
  std::string mode;       // dense | threshold
  double target_density = 0;  // 0: tau is fixed
  // Threshold mode with a fixed tau: the step, which must match as well (a
  // steered tau continues from where the checkpoint has it). 0 otherwise.
  int64_t fixed_step_quanta = 0;
};

// Everything a run needs to continue exactly where it stopped: resuming from
// it gives the uninterrupted run's replica, byte for byte.
struct TrainingState {
  CheckpointIdentity identity;
  int64_t step_quanta = 0;     // threshold mode: tau at the end (0 for dense)
  double density_average = 0;  // the density controller's moving average
  int epochs_done = 0;          // whole epochs trained
  int64_t samples_into_epoch = 0;  // of epoch `epochs_done`, when stopped inside it
  int64_t steps_done = 0;
  bool pretrained = false;  // the replica holds the pre-trained start
  int batch = 0;  // the minibatch size in force (0 in files from before auto batch)
  std::vector<int64_t> weights;       // param_count quanta
  std::vector<float> residual;        // param_count
  std::vector<float> optimizer_state; // param_count, or empty (sgd)
  uint64_t updates_sent = 0, wire_bytes = 0, samples_done = 0;
  double train_seconds = 0;
  std::string weight_hash;  // WeightHash() of `weights`
};

// Writes atomically (temporary file + rename): a crash while saving leaves
// the previous checkpoint intact.
absl::Status SaveTrainingState(const std::string& path, const TrainingState& state);

// Loads the checkpoint at `path` for a run configured as `expected` with
// `param_count` parameters. kFailedPrecondition naming the field when it
// belongs to another configuration; kDataLoss, naming the file, for a file
// that is not a whole checkpoint or arrays of the wrong size.
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& path,
                                                const CheckpointIdentity& expected,
                                                size_t param_count);

// The file layer under the two above: the message as stored. LoadCheckpoint
// gives kNotFound when missing; kDataLoss, naming the file, for a wrong
// magic, a checksum mismatch (corruption or truncation), an unparseable
// body or an unknown format version.
absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& checkpoint);
absl::StatusOr<v1::Checkpoint> LoadCheckpoint(const std::string& path);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_CHECKPOINT_H_
