#include "worker/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"

namespace reckon::worker {
namespace {

// IDX files are tiny (tens of MB); refuse anything absurd before allocating.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 32;

uint32_t BigEndian32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// The whole (decompressed) file. gzopen reads plain files transparently.
absl::StatusOr<std::vector<uint8_t>> ReadMaybeGzip(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::UnavailableError(absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  std::vector<uint8_t> out;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    const int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int err = 0;
      const std::string msg = gzerror(f, &err);
      gzclose(f);
      return absl::DataLossError(absl::StrCat(path, ": corrupt or truncated: ", msg));
    }
    if (n == 0) break;
    out.insert(out.end(), chunk.begin(), chunk.begin() + n);
    if (out.size() > kMaxIdxBytes) {
      gzclose(f);
      return absl::DataLossError(absl::StrCat(path, ": larger than 4 GiB, not an IDX file"));
    }
  }
  gzclose(f);
  return out;
}

}  // namespace

std::string FindIdxFile(const std::string& dir, const std::string& name) {
  const std::string plain = absl::StrCat(dir, "/", name);
  if (std::filesystem::exists(plain)) return plain;
  return plain + ".gz";
}

absl::StatusOr<IdxArray> ReadIdx(const std::string& path, int expected_rank) {
  RECKON_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadMaybeGzip(path));
  const std::vector<uint8_t>& b = bytes;
  if (b.size() < 4 || b[0] != 0 || b[1] != 0) {
    return absl::DataLossError(absl::StrCat(path, ": not an IDX file (bad magic)"));
  }
  if (b[2] != 0x08) {
    return absl::DataLossError(absl::StrCat(path, ": IDX element type 0x", absl::Hex(b[2]),
                                            " is not unsigned byte (0x08)"));
  }
  const int rank = b[3];
  if (rank != expected_rank) {
    return absl::DataLossError(
        absl::StrCat(path, ": IDX has ", rank, " dimensions, expected ", expected_rank));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (b.size() < header) {
    return absl::DataLossError(absl::StrCat(path, ": truncated IDX header"));
  }
  IdxArray out;
  uint64_t elements = 1;
  for (int d = 0; d < rank; ++d) {
    out.dims.push_back(BigEndian32(&b[4 + 4 * d]));
    elements *= out.dims.back();
    if (elements > kMaxIdxBytes) {
      return absl::DataLossError(absl::StrCat(path, ": IDX dimensions too large"));
    }
  }
  if (b.size() - header != elements) {
    return absl::DataLossError(absl::StrCat(path, ": header says ", elements,
                                            " bytes of data, file has ", b.size() - header,
                                            b.size() - header < elements ? " (truncated)" : ""));
  }
  out.data.assign(b.begin() + static_cast<ptrdiff_t>(header), b.end());
  return out;
}

namespace {

// kNotFound when `dir` is not a directory; for the default one, naming the
// Debian package that provides it.
absl::Status CheckDataDir(const std::string& dir) {
  if (std::filesystem::is_directory(dir)) return absl::OkStatus();
  std::string hint;
  if (dir == kDefaultDataDir) {
    hint =
        " (install Debian's dataset-fashion-mnist package: apt-get install dataset-fashion-mnist)";
  }
  return absl::NotFoundError(absl::StrCat("data directory ", dir, " does not exist", hint));
}

}  // namespace

absl::StatusOr<Dataset> LoadIdxDataset(const std::string& dir, const std::string& prefix,
                                       float divisor) {
  RECKON_RETURN_IF_ERROR(CheckDataDir(dir));
  const std::string images_path = FindIdxFile(dir, prefix + "-images-idx3-ubyte");
  const std::string labels_path = FindIdxFile(dir, prefix + "-labels-idx1-ubyte");
  RECKON_ASSIGN_OR_RETURN(IdxArray images, ReadIdx(images_path, 3));
  RECKON_ASSIGN_OR_RETURN(IdxArray labels, ReadIdx(labels_path, 1));
  if (images.dims[0] != labels.dims[0]) {
    return absl::DataLossError(absl::StrCat(images_path, " has ", images.dims[0], " images but ",
                                            labels_path, " has ", labels.dims[0], " labels"));
  }
  Dataset ds;
  ds.rows = static_cast<int>(images.dims[1]);
  ds.cols = static_cast<int>(images.dims[2]);
  ds.images.resize(images.data.size());
  for (size_t i = 0; i < images.data.size(); ++i) ds.images[i] = images.data[i] / divisor;
  ds.labels.resize(labels.data.size());
  for (size_t i = 0; i < labels.data.size(); ++i) {
    if (labels.data[i] >= 10) {
      return absl::DataLossError(absl::StrCat(labels_path, ": label ", int{labels.data[i]},
                                              " at position ", i, " is not in [0, 10)"));
    }
    ds.labels[i] = labels.data[i];
  }
  return ds;
}

absl::StatusOr<size_t> CountIdxSamples(const std::string& dir, const std::string& prefix) {
  RECKON_RETURN_IF_ERROR(CheckDataDir(dir));
  RECKON_ASSIGN_OR_RETURN(const IdxArray labels,
                          ReadIdx(FindIdxFile(dir, prefix + "-labels-idx1-ubyte"), 1));
  return static_cast<size_t>(labels.dims[0]);
}

PixelStats ComputePixelStats(const Dataset& ds) {
  // Summed in a fixed order in double: the same result everywhere.
  double sum = 0, sum_sq = 0;
  for (const float x : ds.images) {
    sum += x;
    sum_sq += double(x) * x;
  }
  PixelStats stats;
  const double n = std::max<double>(1, ds.images.size());
  stats.mean = sum / n;
  stats.stddev = std::sqrt(std::max(1e-12, sum_sq / n - stats.mean * stats.mean));
  return stats;
}

InputTransform TransformOf(const PixelStats& stats, int features) {
  InputTransform t;
  t.divisor = 255.0f;  // LoadIdxDataset's
  t.mean.assign(size_t(features), static_cast<float>(stats.mean));
  t.inv_stddev.assign(size_t(features), static_cast<float>(1.0 / stats.stddev));
  return t;
}

InputTransform TransformOf(const FeatureStats& stats) {
  InputTransform t;
  t.mean.resize(stats.mean.size());
  t.inv_stddev.resize(stats.mean.size());
  for (size_t j = 0; j < stats.mean.size(); ++j) {
    t.mean[j] = static_cast<float>(stats.mean[j]);
    t.inv_stddev[j] = static_cast<float>(1.0 / stats.stddev[j]);
  }
  return t;
}

void Standardize(const InputTransform& t, Dataset* ds) {
  const size_t width = t.mean.size();
  for (size_t i = 0; i < ds->size(); ++i) {
    float* row = &ds->images[i * width];
    for (size_t j = 0; j < width; ++j) row[j] = (row[j] - t.mean[j]) * t.inv_stddev[j];
  }
}

void Standardize(const PixelStats& stats, Dataset* ds) {
  Standardize(TransformOf(stats, ds->features()), ds);
}

FeatureStats FeatureSums::Stats() const {
  const size_t width = sum_.size();
  FeatureStats stats;
  stats.mean.resize(width);
  stats.stddev.resize(width);
  const double n = std::max<double>(1, double(rows_));
  for (size_t j = 0; j < width; ++j) {
    stats.mean[j] = sum_[j] / n;
    const double variance = sum_sq_[j] / n - stats.mean[j] * stats.mean[j];
    stats.stddev[j] = variance > 1e-12 ? std::sqrt(variance) : 1.0;
  }
  return stats;
}

FeatureStats ComputeFeatureStats(const Dataset& ds) {
  const size_t width = static_cast<size_t>(ds.features());
  FeatureSums sums(width);
  for (size_t i = 0; i < ds.size(); ++i) sums.Add(&ds.images[i * width]);
  return sums.Stats();
}

void Standardize(const FeatureStats& stats, Dataset* ds) { Standardize(TransformOf(stats), ds); }

void SeededShuffle(std::span<uint32_t> items, uint64_t seed) {
  codec::SplitMix64 rng(seed);
  for (size_t i = items.size(); i > 1; --i) {
    const size_t j = static_cast<size_t>(rng.Uniform(i - 1));
    std::swap(items[i - 1], items[j]);
  }
}

size_t ShardSize(size_t count, int shard, int shards) {
  const size_t i = static_cast<size_t>(shard), n = static_cast<size_t>(shards);
  return i < count ? (count - i + n - 1) / n : 0;
}

absl::StatusOr<std::vector<uint32_t>> ShardIndices(size_t count, int shard, int shards,
                                                   uint64_t seed) {
  if (shards < 1 || shard < 0 || shard >= shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard ", shard, "/", shards, ": need 0 <= i < n"));
  }
  std::vector<uint32_t> all(count);
  for (size_t i = 0; i < count; ++i) all[i] = static_cast<uint32_t>(i);
  SeededShuffle(all, seed ^ 0x5368617264ull);  // "Shard": independent of epoch shuffles
  std::vector<uint32_t> mine;
  mine.reserve(ShardSize(count, shard, shards));
  for (size_t i = static_cast<size_t>(shard); i < count; i += static_cast<size_t>(shards)) {
    mine.push_back(all[i]);
  }
  return mine;
}

absl::Status ParseShard(const std::string& text, int* shard, int* shards) {
  const std::vector<std::string> parts = absl::StrSplit(text, '/');
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], shard) ||
      !absl::SimpleAtoi(parts[1], shards) || *shards < 1 || *shard < 0 || *shard >= *shards) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard '", text, "' is not i/n with 0 <= i < n"));
  }
  return absl::OkStatus();
}

}  // namespace reckon::worker
