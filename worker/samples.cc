#include "worker/samples.h"

#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace reckon::worker {

absl::Status InMemorySamples::Gather(std::span<const uint32_t> indices, float* x,
                                     int32_t* y) const {
  const size_t width = static_cast<size_t>(data_.features());
  for (size_t b = 0; b < indices.size(); ++b) {
    std::memcpy(x + b * width, &data_.images[size_t(indices[b]) * width], sizeof(float) * width);
    y[b] = data_.labels[indices[b]];
  }
  return absl::OkStatus();
}

absl::Status InMemorySamples::Range(size_t first, size_t count, float* x, int32_t* y) const {
  const size_t width = static_cast<size_t>(data_.features());
  std::memcpy(x, &data_.images[first * width], sizeof(float) * width * count);
  std::memcpy(y, &data_.labels[first], sizeof(int32_t) * count);
  return absl::OkStatus();
}

namespace {

constexpr size_t kPage = 4096;
// Ranges the read-ahead thread holds at most: the trainer asks for the
// next few batches at each step; past this it has fallen behind, and what
// it has not reached is dropped (already read, or soon, by the gather).
constexpr size_t kMaxAheadRanges = size_t{1} << 16;
// The share of a split's pages in the page cache above which its rows are
// read through the mapping, not with pread (samples.h).
constexpr double kCachedEnough = 0.95;

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
      const int64_t label = y.IntegerAt(r);
      RECKON_RETURN_IF_ERROR(CheckLabel(ys[f], r, label, max_classes));
      out->labels_.push_back(static_cast<int32_t>(label));
      sums.Add(row.data());
    }
    // The training split is read in a shuffled order from now on: no
    // read-ahead around each read (the read-ahead thread asks for the rows
    // themselves). The test split is read in order: the kernel's default.
    if (train) x.AdviseReads(POSIX_FADV_RANDOM);
    Shard shard{std::move(x), out->total_rows_};
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
  out->size_checked_in_.assign(out->shards_.size(), 0);
  // The pass read every page: those still in the page cache say whether
  // the split fits in memory. If nearly all do, the rows are read through
  // the mapping the pass left; if not, with pread, the pass's pages
  // unmapped first (kept in the page cache) so that the kernel drops them
  // without a walk of the mapping (samples.h).
  uint64_t resident = 0, pages = 0;
  for (const Shard& shard : out->shards_) {
    const auto [in, of] = shard.x.ResidentPages();
    resident += in;
    pages += of;
  }
  const double cached_share = pages == 0 ? 1.0 : double(resident) / double(pages);
  if (cached_share < kCachedEnough) {
    for (const Shard& shard : out->shards_) shard.x.Advise(MADV_DONTNEED);
  }
  out->read_through_mapping_.store(cached_share >= kCachedEnough);
  out->reader_ = std::thread([p = out.get(), cached_share] { p->ReadAheadLoop(cached_share); });
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

void MappedNpySamples::StandardizeRows(size_t rows, float* x) const {
  if (mean_.empty()) return;
  // Standardize's arithmetic, row by row (dataset.cc): the same floats.
  for (size_t b = 0; b < rows; ++b) {
    float* row = x + b * features_;
    for (size_t j = 0; j < features_; ++j) row[j] = (row[j] - mean_[j]) * inv_stddev_[j];
  }
}

absl::Status MappedNpySamples::Gather(std::span<const uint32_t> indices, float* x,
                                      int32_t* y) const {
  const bool through_mapping = read_through_mapping_.load(std::memory_order_relaxed);
  if (through_mapping) ++gathers_;
  for (size_t b = 0; b < indices.size(); ++b) {
    const auto [shard, r] = Locate(indices[b]);
    float* row = x + b * features_;
    if (through_mapping) {
      // A file cut since the start's check reads as zeros or a SIGBUS
      // through the mapping (pread says so itself): each shard's size is
      // checked once a call.
      uint64_t& checked = size_checked_in_[size_t(shard - shards_.data())];
      if (checked != gathers_) {
        RECKON_RETURN_IF_ERROR(shard->x.CheckUnchangedSize());
        checked = gathers_;
      }
      shard->x.RowAsFloats(r, row);
    } else {
      RECKON_RETURN_IF_ERROR(shard->x.ReadRowsAsFloats(r, 1, raw_, row));
    }
    StandardizeRows(1, row);  // while the row is in the L1 cache
    y[b] = labels_[indices[b]];
  }
  return absl::OkStatus();
}

absl::Status MappedNpySamples::Range(size_t first, size_t count, float* x, int32_t* y) const {
  // Read, whatever the page cache holds: the rows are in order, one read
  // a shard the range crosses (not a system call a row).
  for (size_t done = 0; done < count;) {
    const auto [shard, r] = Locate(first + done);
    const size_t rows = std::min<size_t>(count - done, shard->x.rows() - r);
    RECKON_RETURN_IF_ERROR(shard->x.ReadRowsAsFloats(r, rows, raw_, x + done * features_));
    done += rows;
  }
  std::memcpy(y, labels_.data() + first, sizeof(int32_t) * count);
  StandardizeRows(count, x);
  return absl::OkStatus();
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

bool MappedNpySamples::reads_through_mapping() const {
  return read_through_mapping_.load(std::memory_order_relaxed);
}

uint64_t MappedNpySamples::pages_read_ahead() const {
  std::lock_guard<std::mutex> l(mu_);
  return pages_touched_;
}

void MappedNpySamples::ReadAheadLoop(double cached_share) {
  // Whether the rows are in the page cache already, sampled: one range in
  // kSampleEvery is looked up (mincore) and the share found cached kept as
  // a moving average. While nearly all are (the data fits in memory), the
  // ranges are not asked for and the rows are read through the mapping: a
  // system call a row, madvise or pread, costs more than the faults it
  // saves there (a tiny model on cached data ran at 0.5-0.95x with
  // madvise, 0.53x with pread); under memory pressure, mapped pages are
  // what costs (samples.h).
  constexpr int kSampleEvery = 16;
  int since_sample = 0;
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
      read_through_mapping_.store(cached_share >= kCachedEnough, std::memory_order_relaxed);
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
