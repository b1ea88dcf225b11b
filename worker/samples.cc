#include "worker/samples.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace reckon::worker {

void InMemorySamples::Gather(std::span<const uint32_t> indices, float* x, int32_t* y) const {
  const size_t width = static_cast<size_t>(data_.features());
  for (size_t b = 0; b < indices.size(); ++b) {
    std::memcpy(x + b * width, &data_.images[size_t(indices[b]) * width], sizeof(float) * width);
    y[b] = data_.labels[indices[b]];
  }
}

void InMemorySamples::Range(size_t first, size_t count, float* x, int32_t* y) const {
  const size_t width = static_cast<size_t>(data_.features());
  std::memcpy(x, &data_.images[first * width], sizeof(float) * width * count);
  std::memcpy(y, &data_.labels[first], sizeof(int32_t) * count);
}

namespace {

constexpr size_t kPage = 4096;
// Ranges the read-ahead thread holds at most: the trainer asks for the
// next few batches at each step; past this it has fallen behind, and what
// it has not reached is dropped (already read, or soon, by the gather).
constexpr size_t kMaxAheadRanges = size_t{1} << 16;

}  // namespace

absl::StatusOr<std::unique_ptr<MappedNpySamples>> MappedNpySamples::Open(
    const NpyDatasetShape& shape, const std::string& split, int max_classes,
    MappedSplitScan* scan) {
  const bool train = split == "train";
  const std::vector<std::string> xs = train ? shape.train_x : std::vector{shape.test_x};
  const std::vector<std::string> ys = train ? shape.train_y : std::vector{shape.test_y};
  std::unique_ptr<MappedNpySamples> out(new MappedNpySamples());
  out->features_ = shape.features;
  const size_t width = static_cast<size_t>(shape.features);
  // One pass, in row order: the checks LoadNpyDataset makes, and the sums
  // ComputeFeatureStats makes, in its order (the same statistics).
  FeatureSums sums(width);
  std::vector<float> row(width);
  for (size_t f = 0; f < xs.size(); ++f) {
    RECKON_ASSIGN_OR_RETURN(NpyFile x, NpyFile::Open(xs[f]));
    RECKON_ASSIGN_OR_RETURN(NpyFile y, NpyFile::Open(ys[f]));
    if (x.row_elements() != shape.features || y.rows() != x.rows()) {
      return absl::DataLossError(absl::StrCat(xs[f], ": changed since the dataset was inspected (",
                                              x.rows(), " x ", x.row_elements(), ", ", y.rows(),
                                              " labels)"));
    }
    for (uint64_t r = 0; r < x.rows(); ++r) {
      x.RowAsFloats(r, row.data());
      RECKON_RETURN_IF_ERROR(CheckSample(xs[f], r, row.data(), width));
      RECKON_RETURN_IF_ERROR(CheckLabel(ys[f], r, y.IntegerAt(r), max_classes));
      sums.Add(row.data());
    }
    // The training split is read in a shuffled order from now on: no
    // read-around on a fault (the read-ahead thread asks for the rows
    // themselves). The test split is read in order: the kernel's default.
    if (train) x.Advise(MADV_RANDOM);
    Shard shard{std::move(x), std::move(y), out->total_rows_};
    out->total_rows_ += shard.x.rows();
    out->shards_.push_back(std::move(shard));
  }
  if (out->total_rows_ > UINT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(shape.dir, ": the ", split, " split has ",
                                                   out->total_rows_,
                                                   " samples; at most 2^32 - 1 are indexed"));
  }
  if (scan != nullptr) {
    scan->rows = out->total_rows_;
    scan->stats = sums.Stats();
  }
  out->reader_ = std::thread([p = out.get()] { p->ReadAheadLoop(); });
  return out;
}

MappedNpySamples::~MappedNpySamples() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (reader_.joinable()) reader_.join();
}

void MappedNpySamples::SetTransform(const InputTransform& t) {
  mean_ = t.mean;
  inv_stddev_ = t.inv_stddev;
}

std::pair<const MappedNpySamples::Shard*, uint64_t> MappedNpySamples::Locate(uint64_t row) const {
  auto it = std::upper_bound(shards_.begin(), shards_.end(), row,
                             [](uint64_t r, const Shard& s) { return r < s.first_row; });
  const Shard* shard = &*std::prev(it);
  return {shard, row - shard->first_row};
}

void MappedNpySamples::Row(uint64_t row, float* x, int32_t* y) const {
  const auto [shard, r] = Locate(row);
  shard->x.RowAsFloats(r, x);
  // Standardize's arithmetic, row by row (dataset.cc): the same floats.
  for (size_t j = 0; j < mean_.size(); ++j) x[j] = (x[j] - mean_[j]) * inv_stddev_[j];
  *y = static_cast<int32_t>(shard->y.IntegerAt(r));  // checked by Open
}

void MappedNpySamples::Gather(std::span<const uint32_t> indices, float* x, int32_t* y) const {
  for (size_t b = 0; b < indices.size(); ++b) Row(indices[b], x + b * features_, y + b);
}

void MappedNpySamples::Range(size_t first, size_t count, float* x, int32_t* y) const {
  for (size_t b = 0; b < count; ++b) Row(first + b, x + b * features_, y + b);
}

void MappedNpySamples::WillNeed(std::span<const uint32_t> indices) const {
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const uint32_t index : indices) {
      const auto [shard, r] = Locate(index);
      const size_t x_bytes = features_ * NpyTypeSize(shard->x.header().type);
      // The features only: a page of labels holds hundreds of rows' (one
      // value a row, not D), and stays in the page cache.
      ahead_.emplace_back(shard->x.data() + r * x_bytes, x_bytes);
    }
    while (ahead_.size() > kMaxAheadRanges) ahead_.pop_front();
  }
  wake_.notify_one();
}

uint64_t MappedNpySamples::pages_read_ahead() const {
  std::lock_guard<std::mutex> l(mu_);
  return pages_touched_;
}

void MappedNpySamples::ReadAheadLoop() {
  // Whether the rows are in the page cache already, sampled: one range in
  // kSampleEvery is looked up (mincore) and the share found cached kept as
  // a moving average. While nearly all are (the data fits in memory), the
  // ranges are not asked for: a system call a row would cost more than the
  // faults it saves (a tiny model on cached data ran at 0.5-0.95x).
  constexpr int kSampleEvery = 16;
  constexpr double kCachedEnough = 0.95;
  int since_sample = 0;
  double cached_share = 0;
  std::unique_lock<std::mutex> l(mu_);
  for (;;) {
    wake_.wait(l, [&] { return stop_ || !ahead_.empty(); });
    if (stop_) return;
    const auto [bytes, length] = ahead_.front();
    ahead_.pop_front();
    l.unlock();
    const uintptr_t first = reinterpret_cast<uintptr_t>(bytes) / kPage;
    const uintptr_t last = (reinterpret_cast<uintptr_t>(bytes) + length - 1) / kPage;
    bool ask = cached_share < kCachedEnough;
    if (++since_sample >= kSampleEvery) {
      since_sample = 0;
      unsigned char resident = 0;
      const bool cached = mincore(reinterpret_cast<void*>(first * kPage), kPage, &resident) == 0 &&
                          (resident & 1) != 0;
      cached_share = 0.9 * cached_share + 0.1 * (cached ? 1.0 : 0.0);
      ask = ask || !cached;
    }
    // The pages asked of the kernel without waiting for them
    // (MADV_WILLNEED starts their reads): many rows' reads in flight at
    // once, not one fault at a time in the training thread's gather.
    uint64_t asked = 0;
    if (ask) {
      madvise(reinterpret_cast<void*>(first * kPage), (last - first + 1) * kPage, MADV_WILLNEED);
      asked = last - first + 1;
    }
    l.lock();
    pages_touched_ += asked;
  }
}

}  // namespace reckon::worker
