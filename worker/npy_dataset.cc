#include "worker/npy_dataset.h"

#include <cmath>
#include <filesystem>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "worker/npy.h"

namespace reckon::worker {
namespace {

// At most this many shards a split (a typo in a loop must not open a
// million files).
constexpr int kMaxShards = 100000;

bool Exists(const std::string& path) { return std::filesystem::exists(path); }

std::string ShardName(const std::string& dir, const std::string& stem, int i) {
  return absl::StrFormat("%s/%s-%05d.npy", dir, stem, i);
}

// The x and y files of `split`: one pair, or its shards from 00000 on.
absl::Status FindSplit(const std::string& dir, const std::string& split,
                       std::vector<std::string>* xs, std::vector<std::string>* ys) {
  const std::string x = absl::StrCat(dir, "/", split, "_x.npy");
  const std::string y = absl::StrCat(dir, "/", split, "_y.npy");
  if (Exists(x) || Exists(y)) {
    if (!Exists(x)) return absl::NotFoundError(absl::StrCat(x, ": missing (", y, " is there)"));
    if (!Exists(y)) return absl::NotFoundError(absl::StrCat(y, ": missing (", x, " is there)"));
    xs->push_back(x);
    ys->push_back(y);
    return absl::OkStatus();
  }
  for (int i = 0; i < kMaxShards; ++i) {
    const std::string sx = ShardName(dir, split + "_x", i), sy = ShardName(dir, split + "_y", i);
    if (!Exists(sx) && !Exists(sy)) break;
    if (!Exists(sx)) return absl::NotFoundError(absl::StrCat(sx, ": missing (", sy, " is there)"));
    if (!Exists(sy)) return absl::NotFoundError(absl::StrCat(sy, ": missing (", sx, " is there)"));
    xs->push_back(sx);
    ys->push_back(sy);
  }
  if (xs->empty()) {
    return absl::NotFoundError(absl::StrCat(dir, ": no ", split, "_x.npy and ", split,
                                            "_y.npy (nor ", split, "_x-00000.npy shards)"));
  }
  return absl::OkStatus();
}

// A features file's header: 2-D, float32, float16 or uint8.
absl::Status CheckFeatures(const NpyFile& x) {
  const NpyHeader& h = x.header();
  if (h.shape.size() != 2) {
    return absl::DataLossError(absl::StrCat(x.path(), ": features must have shape [N, D], not ",
                                            h.shape.size(), " dimensions"));
  }
  if (h.type != NpyType::kFloat32 && h.type != NpyType::kFloat16 && h.type != NpyType::kUint8) {
    return absl::DataLossError(absl::StrCat(x.path(), ": features are ", NpyTypeName(h.type),
                                            "; take float32, float16 or uint8"));
  }
  if (h.shape[1] == 0) return absl::DataLossError(absl::StrCat(x.path(), ": zero features"));
  return absl::OkStatus();
}

absl::Status CheckLabels(const NpyFile& y, uint64_t samples) {
  const NpyHeader& h = y.header();
  if (h.shape.size() != 1) {
    return absl::DataLossError(absl::StrCat(y.path(), ": labels must have shape [N], not ",
                                            h.shape.size(), " dimensions"));
  }
  if (NpyTypeIsFloat(h.type)) {
    return absl::DataLossError(
        absl::StrCat(y.path(), ": labels are ", NpyTypeName(h.type), "; take an integer type"));
  }
  if (h.shape[0] != samples) {
    return absl::DataLossError(
        absl::StrCat(y.path(), ": ", h.shape[0], " labels for ", samples, " samples of features"));
  }
  return absl::OkStatus();
}

// Opens and checks one split's files; `features` 0: any (then set, and
// `features_from` names the file that set it).
absl::StatusOr<uint64_t> InspectSplit(const std::vector<std::string>& xs,
                                      const std::vector<std::string>& ys, uint64_t* features,
                                      std::string* features_from) {
  uint64_t samples = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    RECKON_ASSIGN_OR_RETURN(NpyFile x, NpyFile::Open(xs[i]));
    RECKON_RETURN_IF_ERROR(CheckFeatures(x));
    if (*features == 0) {
      *features = x.header().shape[1];
      *features_from = xs[i];
    }
    if (x.header().shape[1] != *features) {
      return absl::DataLossError(absl::StrCat(xs[i], ": ", x.header().shape[1],
                                              " features a sample, where ", *features_from, " has ",
                                              *features));
    }
    RECKON_ASSIGN_OR_RETURN(NpyFile y, NpyFile::Open(ys[i]));
    RECKON_RETURN_IF_ERROR(CheckLabels(y, x.rows()));
    samples += x.rows();
  }
  return samples;
}

}  // namespace

bool IsNpyDataset(const std::string& dir) {
  return Exists(dir + "/train_x.npy") || Exists(ShardName(dir, "train_x", 0));
}

absl::StatusOr<NpyDatasetShape> InspectNpyDataset(const std::string& dir) {
  NpyDatasetShape s;
  s.dir = dir;
  RECKON_RETURN_IF_ERROR(FindSplit(dir, "train", &s.train_x, &s.train_y));
  std::vector<std::string> test_x, test_y;
  RECKON_RETURN_IF_ERROR(FindSplit(dir, "test", &test_x, &test_y));
  if (test_x.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(dir, ": the test split is one pair, test_x.npy and test_y.npy"));
  }
  s.test_x = test_x[0];
  s.test_y = test_y[0];
  std::string features_from;
  RECKON_ASSIGN_OR_RETURN(s.train_samples,
                          InspectSplit(s.train_x, s.train_y, &s.features, &features_from));
  RECKON_ASSIGN_OR_RETURN(s.test_samples,
                          InspectSplit(test_x, test_y, &s.features, &features_from));
  return s;
}

absl::Status CheckSample(const std::string& x_path, uint64_t sample, const float* row,
                         uint64_t width) {
  for (uint64_t j = 0; j < width; ++j) {
    if (!std::isfinite(row[j])) {
      return absl::DataLossError(absl::StrCat(x_path, ": sample ", sample, " has ",
                                              std::isnan(row[j]) ? "NaN" : "an infinity",
                                              " at feature ", j));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckLabel(const std::string& y_path, uint64_t sample, int64_t label,
                        int max_classes) {
  if (label >= 0 && label < max_classes) return absl::OkStatus();
  return absl::DataLossError(absl::StrCat(y_path, ": label ", label, " of sample ", sample,
                                          " is outside [0, ", max_classes, ")"));
}

absl::StatusOr<Dataset> LoadNpyDataset(const std::string& dir, const std::string& split,
                                       int max_classes) {
  RECKON_ASSIGN_OR_RETURN(const NpyDatasetShape shape, InspectNpyDataset(dir));
  return LoadNpyDataset(shape, split, max_classes);
}

absl::StatusOr<Dataset> LoadNpyDataset(const NpyDatasetShape& shape, const std::string& split,
                                       int max_classes) {
  const bool train = split == "train";
  const std::vector<std::string> xs = train ? shape.train_x : std::vector{shape.test_x};
  const std::vector<std::string> ys = train ? shape.train_y : std::vector{shape.test_y};
  const uint64_t samples = train ? shape.train_samples : shape.test_samples;
  if (samples * shape.features > (uint64_t{1} << 36)) {
    return absl::ResourceExhaustedError(
        absl::StrCat(shape.dir, ": the ", split, " split holds ", samples, " x ", shape.features,
                     " features, over 2^36 floats: too large to read into memory"));
  }
  Dataset ds;
  ds.rows = 1;
  ds.cols = static_cast<int>(shape.features);
  ds.images.resize(samples * shape.features);
  ds.labels.resize(samples);
  uint64_t at = 0;
  for (size_t f = 0; f < xs.size(); ++f) {
    RECKON_ASSIGN_OR_RETURN(NpyFile x, NpyFile::Open(xs[f]));
    RECKON_ASSIGN_OR_RETURN(NpyFile y, NpyFile::Open(ys[f]));
    for (uint64_t r = 0; r < x.rows(); ++r, ++at) {
      float* row = &ds.images[at * shape.features];
      x.RowAsFloats(r, row);
      RECKON_RETURN_IF_ERROR(CheckSample(xs[f], r, row, shape.features));
      const int64_t label = y.IntegerAt(r);
      RECKON_RETURN_IF_ERROR(CheckLabel(ys[f], r, label, max_classes));
      ds.labels[at] = static_cast<int32_t>(label);
    }
  }
  return ds;
}

}  // namespace reckon::worker
