// Where a worker's training and evaluation read their samples (issue 35):
// one split's rows of standardized float32 features and their labels, by
// index. Two kinds:
//
// - InMemorySamples: a Dataset read whole and standardized at the start
//   (IDX files; a NumPy dataset with --data-in-memory).
// - MappedNpySamples: a NumPy dataset's files opened and mapped (npy.h) and
//   read as the epoch asks for its rows, each converted and standardized
//   as it is gathered, with the next batches' pages asked of the kernel
//   ahead (MADV_WILLNEED, from a thread of its own: many reads in flight,
//   not one fault at a time): a dataset larger than the machine's memory
//   trains, the kernel keeping what fits in its page cache. While the rows
//   asked for are not all in the page cache, the features are read with
//   pread(2), not through the mapping: a page only in the page cache is
//   dropped at once under memory pressure, a mapped one costs a walk of
//   its mappings and a TLB shootdown (a quarter of a worker's samples under
//   a memory limit of a quarter of its data; pread ran 3.6x faster). Once
//   nearly all are (the data fits), through the mapping: no system call a
//   row (pread ran 0.53x there). docs/benchmarks.md "A dataset larger than
//   memory". The labels are kept in memory from the start's check (4 bytes
//   a sample).
//
// Both give the same floats for a row, bit for bit (the same conversion
// and the same x = (raw - mean) * inv_stddev in float32), so a run's
// replica does not depend on which one read its data.
//
// Threads: one caller at a time (the training thread). MappedNpySamples'
// read-ahead thread only asks for pages, and says (an atomic) whether it
// found them cached.
#ifndef RECKON_WORKER_SAMPLES_H_
#define RECKON_WORKER_SAMPLES_H_

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/dataset.h"
#include "worker/npy.h"
#include "worker/npy_dataset.h"

namespace reckon::worker {

class Samples {
 public:
  virtual ~Samples() = default;
  virtual size_t size() const = 0;
  virtual int features() const = 0;
  // Rows `indices` (each < size()), standardized, to `x` (indices.size() x
  // features() floats) and their labels to `y`. Fails only for files read
  // as they are asked for (a file cut or unreadable since it was checked:
  // the error names it); `x` and `y` are then partly written.
  virtual absl::Status Gather(std::span<const uint32_t> indices, float* x, int32_t* y) const = 0;
  // Rows [first, first + count) the same way (REQUIRES: first + count <= size()).
  virtual absl::Status Range(size_t first, size_t count, float* x, int32_t* y) const = 0;
  // Rows the caller will Gather soon (the next batches of the epoch's
  // order): advice, which a mapped split reads ahead. No-op in memory.
  virtual void WillNeed(std::span<const uint32_t> /*indices*/) const {}
};

class InMemorySamples final : public Samples {
 public:
  explicit InMemorySamples(Dataset data) : data_(std::move(data)) {}
  size_t size() const override { return data_.size(); }
  int features() const override { return data_.features(); }
  absl::Status Gather(std::span<const uint32_t> indices, float* x, int32_t* y) const override;
  absl::Status Range(size_t first, size_t count, float* x, int32_t* y) const override;
  const Dataset& data() const { return data_; }

 private:
  const Dataset data_;
};

// The statistics of a split read once, streaming, in row order: the same
// sums ComputeFeatureStats makes of the split in memory.
struct MappedSplitScan {
  FeatureStats stats;
  uint64_t rows = 0;
};

class MappedNpySamples final : public Samples {
 public:
  // Maps split "train" or "test" of `shape` (InspectNpyDataset checked its
  // headers) and reads it once, in order: every feature finite and every
  // label in [0, max_classes), or kDataLoss naming the file and the sample
  // (as LoadNpyDataset's); `scan`, when given, gets the features' means and
  // standard deviations (the training split's standardize both splits).
  // Standardization starts once SetTransform gives it.
  static absl::StatusOr<std::unique_ptr<MappedNpySamples>> Open(const NpyDatasetShape& shape,
                                                                const std::string& split,
                                                                int max_classes,
                                                                MappedSplitScan* scan = nullptr);
  ~MappedNpySamples() override;

  // x = (raw - mean) * inv_stddev from now on (`t` from the training split).
  void SetTransform(const InputTransform& t);

  size_t size() const override { return total_rows_; }
  int features() const override { return static_cast<int>(features_); }
  absl::Status Gather(std::span<const uint32_t> indices, float* x, int32_t* y) const override;
  absl::Status Range(size_t first, size_t count, float* x, int32_t* y) const override;
  void WillNeed(std::span<const uint32_t> indices) const override;

  // Pages the read-ahead thread has asked for (for tests and the benchmark).
  uint64_t pages_read_ahead() const;
  // Whether Gather reads the features through the mapping (the rows it was
  // asked for lately were nearly all in the page cache) or with pread.
  bool reads_through_mapping() const;

 private:
  struct Shard {
    NpyFile x;               // the features; the labels are in labels_
    uint64_t first_row = 0;  // of the split
  };
  MappedNpySamples() = default;
  // The shard holding split row `row`, and the row within it.
  std::pair<const Shard*, uint64_t> Locate(uint64_t row) const;
  // Standardizes `rows` rows of features at `x`, as Standardize does.
  void StandardizeRows(size_t rows, float* x) const;
  // `cached_share`: the start's estimate of the pages in the page cache.
  void ReadAheadLoop(double cached_share);

  std::vector<Shard> shards_;
  uint64_t total_rows_ = 0, features_ = 0;
  std::vector<float> mean_, inv_stddev_;  // empty until SetTransform
  std::vector<int32_t> labels_;           // the split's, checked by Open
  // The caller's thread only: the raw bytes of the rows being read; the
  // Gather calls that read through the mapping, and the last of them that
  // checked each shard's file size.
  mutable std::vector<uint8_t> raw_;
  mutable uint64_t gathers_ = 0;
  mutable std::vector<uint64_t> size_checked_in_;

  // The read-ahead thread: byte ranges of the mappings to ask the kernel
  // for, the oldest dropped past kMaxAheadRanges (it fell behind).
  mutable std::mutex mu_;
  mutable std::condition_variable wake_;
  mutable std::deque<std::pair<const uint8_t*, size_t>> ahead_;
  mutable uint64_t pages_touched_ = 0;
  // Written by the read-ahead thread, read by Gather.
  std::atomic<bool> read_through_mapping_{false};
  bool stop_ = false;
  std::thread reader_;
};

}  // namespace reckon::worker

#endif  // RECKON_WORKER_SAMPLES_H_
