// A dataset of NumPy files (issue 35, docs/guide-worker.md "Your own data"): a folder
// holding train_x.npy and train_y.npy (or shards train_x-00000.npy,
// train_y-00000.npy, ... numbered from 0 without a gap) and test_x.npy and
// test_y.npy. Features are float32, float16 or uint8 of shape [N, D], any
// D; labels are integers of shape [N]; the class count is the largest
// label plus one.
//
// This part checks a folder's files (their headers), and reads a split
// into memory (--data-in-memory; samples.h maps it and reads it as it
// trains instead). Every refusal names the file and what is wrong with it.
//
// Threads: functions over files, any thread. Errors: as npy.h, naming the
// file.
#ifndef RECKON_WORKER_NPY_DATASET_H_
#define RECKON_WORKER_NPY_DATASET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/dataset.h"

namespace reckon::worker {

// Whether `dir` holds a NumPy dataset (train_x.npy or train_x-00000.npy).
bool IsNpyDataset(const std::string& dir);

// What a NumPy dataset holds, from its headers alone.
struct NpyDatasetShape {
  std::string dir;
  uint64_t train_samples = 0, test_samples = 0;
  uint64_t features = 0;                      // D
  std::vector<std::string> train_x, train_y;  // the files, shards in order
  std::string test_x, test_y;
};

// Finds and checks the files of `dir` (their headers only): kNotFound naming
// what is missing (a shard's partner included), kDataLoss naming the file:
// features not 2-D or of another type than float32, float16, uint8; labels
// not 1-D integers; x and y of one split with different sample counts;
// splits or shards with different feature widths.
absl::StatusOr<NpyDatasetShape> InspectNpyDataset(const std::string& dir);

// The checks every reader of a split makes of a sample, as it reads it:
// kDataLoss naming `x_path` and the sample and feature for a NaN or
// infinite feature (`row`, `width` floats); naming `y_path` and the sample
// for a label outside [0, max_classes).
absl::Status CheckSample(const std::string& x_path, uint64_t sample, const float* row,
                         uint64_t width);
absl::Status CheckLabel(const std::string& y_path, uint64_t sample, int64_t label, int max_classes);

// Reads split "train" or "test" of `dir` into memory (Dataset: rows 1 and
// cols D). kDataLoss naming the file and the row for a feature that is NaN
// or infinite, and the file and the index for a label outside
// [0, max_classes).
absl::StatusOr<Dataset> LoadNpyDataset(const std::string& dir, const std::string& split,
                                       int max_classes);
// The same for a folder InspectNpyDataset checked already (its headers are
// not read again).
absl::StatusOr<Dataset> LoadNpyDataset(const NpyDatasetShape& shape, const std::string& split,
                                       int max_classes);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_NPY_DATASET_H_
