// Checkpoints: fixed-point weights, residual, optimizer state and progress,
// with the configuration they belong to and a SHA-256 checksum.
#ifndef RECKON_WORKER_CHECKPOINT_H_
#define RECKON_WORKER_CHECKPOINT_H_

#include <string>

#include "absl/status/statusor.h"
#include "proto/reckon.pb.h"

namespace reckon::worker {

// Writes atomically (temporary file + rename): a crash while saving leaves
// the previous checkpoint intact.
absl::Status SaveCheckpoint(const std::string& path, const v1::Checkpoint& checkpoint);

// kNotFound when missing; kDataLoss, naming the file, for a wrong magic, a
// checksum mismatch (corruption or truncation) or an unparseable body.
absl::StatusOr<v1::Checkpoint> LoadCheckpoint(const std::string& path);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_CHECKPOINT_H_
