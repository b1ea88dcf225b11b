// Checkpoints: fixed-point weights, residual, optimizer state and progress,
// with the configuration they belong to, in a file guarded by a SHA-256
// checksum (the layout: proto/reckon.proto Checkpoint; the arrays are
// little-endian).
//
// Threads: functions over files, any thread; a checkpoint is written by
// the training thread between steps. Errors: a missing file is kNotFound;
// a damaged one (checksum, layout, sizes) kDataLoss; one of another
// configuration kFailedPrecondition, naming what differs; one too large
// kResourceExhausted. A refusal names the file.
#ifndef RECKON_WORKER_CHECKPOINT_H_
#define RECKON_WORKER_CHECKPOINT_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "codec/codec.h"
#include "proto/reckon.pb.h"
#include "worker/dataset.h"

namespace reckon::worker {

// The configuration a checkpoint belongs to. Resuming under any other is
// refused, naming the field that differs.
struct CheckpointIdentity {
  std::string model;  // ModelShape::ToString()
  // The data's standardization (dataset.h). A checkpoint from before it was
  // kept (empty) resumes under any; one that has it, only on data whose
  // statistics are the same, bit for bit.
  InputTransform input;
  int fraction_bits = 0;
  uint64_t seed = 0;
  std::string optimizer;      // sgd | momentum | adagrad
  std::string mode;           // dense | threshold
  double target_density = 0;  // 0: tau is fixed
  // Threshold mode with a fixed tau: the step, which must match as well (a
  // steered tau continues from where the checkpoint has it). 0 otherwise.
  int64_t fixed_step_quanta = 0;
};

// Everything a run needs to continue exactly where it stopped: resuming from
// it gives the uninterrupted run's replica, byte for byte.
struct TrainingState {
  CheckpointIdentity identity;
  int64_t step_quanta = 0;         // threshold mode: tau at the end (0 for dense)
  double density_average = 0;      // the density controller's moving average
  int epochs_done = 0;             // whole epochs trained
  int64_t samples_into_epoch = 0;  // of epoch `epochs_done`, when stopped inside it
  int64_t steps_done = 0;
  bool pretrained = false;       // the replica holds the pre-trained start
  int batch = 0;                 // the minibatch size in force (0 in files from before auto batch)
  std::vector<int64_t> weights;  // param_count quanta
  std::vector<float> residual;   // param_count
  std::vector<float> optimizer_state;  // param_count, or empty (sgd)
  codec::CodecState codec;             // the quanta codec's (dyntree8's scales), or empty
  uint64_t updates_sent = 0, wire_bytes = 0, samples_done = 0;
  double train_seconds = 0;
  std::string weight_hash;  // WeightHash() of `weights`
};

// The input transform a checkpoint's header holds (empty mean in files from
// before it was kept).
InputTransform InputTransformOf(const v1::Checkpoint& c);

// Writes atomically and durably (SaveCheckpoint): a crash or a power loss
// while saving leaves the previous checkpoint intact.
absl::Status SaveTrainingState(const std::string& path, const TrainingState& state);

// Loads the checkpoint at `path` for a run configured as `expected` with
// `param_count` parameters. kFailedPrecondition naming the field when it
// belongs to another configuration; kDataLoss, naming the file, for a file
// that is not a whole checkpoint or arrays of the wrong size.
absl::StatusOr<TrainingState> LoadTrainingState(const std::string& path,
                                                const CheckpointIdentity& expected,
                                                size_t param_count);

// The file layer under the two above (format 2, proto/reckon.proto
// Checkpoint): the arrays are streamed raw after a small header message, in
// pieces of `io_chunk_bytes` (hashed as they go), so that a checkpoint of
// any size is written and read without a protobuf of it (which ends at
// 2 GiB) or a copy of the whole file in memory, and durably
// (base::AtomicFileWriter: fsync, rename, fsync of the folder).
inline constexpr size_t kCheckpointChunkBytes = size_t{8} << 20;
// The largest file LoadCheckpoint reads, and the largest header message.
inline constexpr uint64_t kMaxCheckpointBytes = uint64_t{64} << 30;
// (The header holds the input standardization: 8 bytes a feature.)
inline constexpr uint64_t kMaxCheckpointHeaderBytes = uint64_t{16} << 20;

struct StoredCheckpoint {
  v1::Checkpoint header;  // everything but the arrays (fields 10-12 empty)
  std::vector<int64_t> weights;
  std::vector<float> residual, optimizer_state;
};

// `header`'s array fields are ignored (the arrays are the spans).
absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& header,
                            std::span<const int64_t> weights, std::span<const float> residual,
                            std::span<const float> optimizer_state,
                            size_t io_chunk_bytes = kCheckpointChunkBytes);
// kNotFound when missing; kDataLoss, naming the file, for a wrong magic, a
// header or arrays that do not fit the file (truncated, or not a
// checkpoint), a checksum mismatch (corruption or truncation), an
// unparseable header or an unknown format version; kResourceExhausted past
// kMaxCheckpointBytes. Reads format 1 files too.
absl::StatusOr<StoredCheckpoint> LoadCheckpoint(const std::string& path,
                                                size_t io_chunk_bytes = kCheckpointChunkBytes);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_CHECKPOINT_H_
