// Training data: IDX files (MNIST / Fashion-MNIST layout, gzip'd or not),
// checked against their headers, as float images in [0, 1] and int labels.
//
// Threads: functions over files, and data read once then read-only: any
// thread. Errors: a missing file kNotFound, a malformed one kDataLoss,
// a mismatch (count, width) kInvalidArgument; each names the file.
#ifndef RECKON_WORKER_DATASET_H_
#define RECKON_WORKER_DATASET_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace reckon::worker {

// Where Debian's dataset-fashion-mnist package puts its files.
inline constexpr char kDefaultDataDir[] = "/usr/share/datasets/fashion-mnist";

// One IDX file's contents: dimensions and raw bytes (element type ubyte).
struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;  // product of dims bytes
};

// Reads an IDX file of unsigned bytes (type code 0x08), gzip'd or not (by
// content, not name). kNotFound naming the file when it is missing;
// kDataLoss naming the file for a wrong magic, a type other than ubyte, a
// dimension count other than `expected_rank`, or data shorter or longer
// than the header says.
absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int expected_rank);
// `<dir>/<name>` if it exists, else `<dir>/<name>.gz` (whether or not that
// does).
std::string FindIdxFile(const std::string& dir, const std::string& name);

struct Dataset {
  int rows = 0, cols = 0;
  std::vector<float> images;    // count x (rows * cols), row-major, in [0, 1]
  std::vector<int32_t> labels;  // count, in [0, classes): 10 for IDX files
  size_t size() const { return labels.size(); }
  int features() const { return rows * cols; }
};

// Loads `<dir>/<prefix>-images-idx3-ubyte[.gz]` and the matching labels
// (prefix "train" or "t10k"). Errors name the file; when the directory is
// the default and missing, the error says which Debian package provides it.
// kDataLoss when image and label counts differ or a label is not in [0, 10).
// `divisor`: pixels are loaded as pixel / divisor (255: in [0, 1], as the
// trainer takes them; 1: raw, as an exported model takes them).
absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, const std::string& prefix,
                                       float divisor = 255.0f);

// The number of samples of `<dir>/<prefix>-labels-idx1-ubyte[.gz]`, read
// from the labels alone (a worker that must know its cluster's shard sizes
// before it loads the images). Errors as LoadIdxDataset's.
absl::StatusOr<size_t> CountIdxSamples(const std::string& dir, const std::string& prefix);

// Pixel mean and standard deviation over all of `ds`'s images.
struct PixelStats {
  double mean = 0, stddev = 1;
};
PixelStats ComputePixelStats(const Dataset& ds);

// x = (x - mean) / stddev for every pixel. The trainer standardizes train and
// test with the training set's statistics: the same numbers on every worker,
// since every worker reads the same files (whatever its shard).
void Standardize(const PixelStats& stats, Dataset* ds);

// What the model's inputs are made of a sample's raw features, in float32
// and in this order: x_j = (raw_j / divisor - mean_j) * inv_stddev_j. The
// IDX reader divides pixels by 255 as it loads (divisor 255); NumPy
// features load as they are (divisor 1). Kept with the weights (checkpoint,
// export), so that a trained model takes raw features and a resume on other
// data is refused.
struct InputTransform {
  float divisor = 1;
  std::vector<float> mean, inv_stddev;  // one per feature
  bool operator==(const InputTransform&) const = default;
};
// The transform Standardize applies: the statistics rounded to float as it
// rounds them.
InputTransform TransformOf(const PixelStats& stats, int features);
struct FeatureStats;
InputTransform TransformOf(const FeatureStats& stats);
// x_j = (x_j - mean_j) * inv_stddev_j for every sample of `ds` (whose
// features are raw / divisor already). REQUIRES: t of ds's width.
void Standardize(const InputTransform& t, Dataset* ds);

// Each feature's mean and standard deviation over `ds`: a NumPy dataset's
// features may have any scales (a constant feature's deviation counts as 1).
// Summed in a fixed order in double: the same on every worker.
struct FeatureStats {
  std::vector<double> mean, stddev;
};
FeatureStats ComputeFeatureStats(const Dataset& ds);
// The sums behind FeatureStats, row by row in the split's order (a mapped
// split is summed as it is read: samples.h), so that every reader gets the
// same statistics bit for bit.
class FeatureSums {
 public:
  explicit FeatureSums(size_t width) : sum_(width, 0.0), sum_sq_(width, 0.0) {}
  void Add(const float* row) {
    for (size_t j = 0; j < sum_.size(); ++j) {
      sum_[j] += row[j];
      sum_sq_[j] += double(row[j]) * row[j];
    }
    ++rows_;
  }
  FeatureStats Stats() const;

 private:
  std::vector<double> sum_, sum_sq_;
  uint64_t rows_ = 0;
};
// x_j = (x_j - mean_j) / stddev_j. REQUIRES: stats of ds's width.
void Standardize(const FeatureStats& stats, Dataset* ds);

// --shard i/n: the i-th of n disjoint subsets, chosen by a seeded shuffle of
// all indices (so shards are balanced and every worker computes the same
// split). kInvalidArgument unless 0 <= i < n.
// How many of `count` samples shard i/n holds (ShardIndices' size, without
// the shuffle). REQUIRES: 0 <= i < n.
size_t ShardSize(size_t count, int shard, int shards);
absl::StatusOr<std::vector<uint32_t>> ShardIndices(size_t count, int shard, int shards,
                                                   uint64_t seed);

// Parses "i/n". kInvalidArgument naming the text otherwise.
absl::Status ParseShard(const std::string& text, int* shard, int* shards);

// Seeded in-place Fisher-Yates shuffle with SplitMix64: the same order on
// every platform (std::shuffle's is not specified).
void SeededShuffle(std::span<uint32_t> items, uint64_t seed);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_DATASET_H_
