// worker/npy_dataset.h: a folder of .npy files found, checked whole and read,
// shards included; every fault refused naming the file.
#include "worker/npy_dataset.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "tests/test_process.h"
#include "worker/data_identity.h"
#include "worker/npy.h"

namespace reckon::worker {
namespace {

template <typename T>
std::string Raw(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

class NpyFolder {
 public:
  std::string dir() const { return dir_.path().string(); }
  template <typename T>
  void Put(const std::string& name, NpyType type, const std::vector<uint64_t>& shape,
           const std::vector<T>& values) {
    std::ofstream((dir_ / name).string(), std::ios::binary) << NpyBytes(type, shape, Raw(values));
  }
  void Remove(const std::string& name) { std::filesystem::remove(dir_ / name); }

 private:
  ::reckon::testing::ScratchDir dir_;
};

// A valid folder: 6 training samples of 3 float32 features, 2 test samples
// of uint8 features, labels of two integer types.
void PutValid(NpyFolder& f) {
  f.Put<float>("train_x.npy", NpyType::kFloat32, {6, 3},
               {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17.5f});
  f.Put<int64_t>("train_y.npy", NpyType::kInt64, {6}, {0, 1, 2, 3, 4, 2});
  f.Put<uint8_t>("test_x.npy", NpyType::kUint8, {2, 3}, {1, 2, 3, 250, 251, 252});
  f.Put<int32_t>("test_y.npy", NpyType::kInt32, {2}, {4, 0});
}

TEST(NpyDataset, AFolderIsInspectedAndReadWithItsShards) {
  NpyFolder f;
  EXPECT_FALSE(IsNpyDataset(f.dir()));
  PutValid(f);
  ASSERT_TRUE(IsNpyDataset(f.dir()));
  absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
  ASSERT_TRUE(shape.ok()) << shape.status();
  EXPECT_EQ(shape->train_samples, 6u);
  EXPECT_EQ(shape->test_samples, 2u);
  EXPECT_EQ(shape->features, 3u);
  absl::StatusOr<Dataset> train = LoadNpyDataset(f.dir(), "train", 5);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->features(), 3);
  EXPECT_EQ(train->labels, (std::vector<int32_t>{0, 1, 2, 3, 4, 2}));
  EXPECT_EQ(train->images[17], 17.5f);
  absl::StatusOr<Dataset> test = LoadNpyDataset(f.dir(), "test", 5);
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(test->images, (std::vector<float>{1, 2, 3, 250, 251, 252}));
  EXPECT_EQ(test->labels, (std::vector<int32_t>{4, 0}));

  // The training split in two shards (float16, then float32), in order.
  f.Remove("train_x.npy");
  f.Remove("train_y.npy");
  f.Put<uint16_t>("train_x-00000.npy", NpyType::kFloat16, {1, 3}, {0x3C00, 0x4000, 0x4200});
  f.Put<uint8_t>("train_y-00000.npy", NpyType::kUint8, {1}, {3});
  f.Put<float>("train_x-00001.npy", NpyType::kFloat32, {2, 3}, {4, 5, 6, 7, 8, 9});
  f.Put<int16_t>("train_y-00001.npy", NpyType::kInt16, {2}, {1, 0});
  f.Put<float>("train_x-00003.npy", NpyType::kFloat32, {1, 3}, {0, 0, 0});  // after a gap: not read
  ASSERT_TRUE(IsNpyDataset(f.dir()));
  train = LoadNpyDataset(f.dir(), "train", 5);
  ASSERT_TRUE(train.ok()) << train.status();
  EXPECT_EQ(train->images, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(train->labels, (std::vector<int32_t>{3, 1, 0}));
}

TEST(NpyDataset, EveryFaultIsRefusedNamingTheFile) {
  auto fault = [](const std::function<void(NpyFolder&)>& spoil) {
    NpyFolder f;
    PutValid(f);
    spoil(f);
    absl::StatusOr<Dataset> train = LoadNpyDataset(f.dir(), "train", 5);
    absl::StatusOr<Dataset> test = LoadNpyDataset(f.dir(), "test", 5);
    const absl::Status s = !train.ok() ? train.status() : test.status();
    EXPECT_FALSE(s.ok());
    std::string message(s.message());
    for (size_t at; (at = message.find(f.dir())) != std::string::npos;) {
      message.replace(at, f.dir().size(), "DIR");
    }
    return message;
  };
  EXPECT_EQ(fault([](NpyFolder& f) { f.Remove("train_y.npy"); }),
            "DIR/train_y.npy: missing (DIR/train_x.npy is there)");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Remove("test_x.npy");
              f.Remove("test_y.npy");
            }),
            "DIR: no test_x.npy and test_y.npy (nor test_x-00000.npy shards)");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<float>("test_x.npy", NpyType::kFloat32, {2, 4}, std::vector<float>(8));
            }),
            "DIR/test_x.npy: 4 features a sample, where DIR/train_x.npy has 3");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<int64_t>("train_y.npy", NpyType::kInt64, {5}, {0, 1, 2, 3, 4});
            }),
            "DIR/train_y.npy: 5 labels for 6 samples of features");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<float>("train_y.npy", NpyType::kFloat32, {6}, std::vector<float>(6));
            }),
            "DIR/train_y.npy: labels are float32; take an integer type");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<float>("train_x.npy", NpyType::kFloat32, {18}, std::vector<float>(18));
            }),
            "DIR/train_x.npy: features must have shape [N, D], not 1 dimensions");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<int32_t>("train_x.npy", NpyType::kInt32, {6, 3}, std::vector<int32_t>(18));
            }),
            "DIR/train_x.npy: features are int32; take float32, float16 or uint8");
  EXPECT_EQ(fault([](NpyFolder& f) {
              std::vector<float> x(18, 1.0f);
              x[7] = std::numeric_limits<float>::quiet_NaN();
              f.Put<float>("train_x.npy", NpyType::kFloat32, {6, 3}, x);
            }),
            "DIR/train_x.npy: sample 2 has NaN at feature 1");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<int64_t>("train_y.npy", NpyType::kInt64, {6}, {0, 1, 2, 3, 5, 0});
            }),
            "DIR/train_y.npy: label 5 of sample 4 is outside [0, 5)");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<int64_t>("train_y.npy", NpyType::kInt64, {6}, {0, 1, -1, 3, 4, 0});
            }),
            "DIR/train_y.npy: label -1 of sample 2 is outside [0, 5)");
  EXPECT_EQ(fault([](NpyFolder& f) {
              f.Put<uint8_t>("train_x-00000.npy", NpyType::kUint8, {1, 3}, {1, 2, 3});
              f.Remove("train_x.npy");
              f.Remove("train_y.npy");
            }),
            "DIR/train_y-00000.npy: missing (DIR/train_x-00000.npy is there)");
}

}  // namespace
}  // namespace reckon::worker

namespace reckon::worker {
namespace {

// The cluster fingerprint's word on the data (data_identity.h): the same for
// the same files in another folder; another for a label changed at either
// end of a large file, for another count, and for IDX data.
TEST(DataIdentity, ChangesWithTheDataNotWithTheFolder) {
  ::reckon::testing::ScratchDir scratch;
  std::vector<int64_t> labels(100000);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t(i % 3);
  const std::vector<float> features(labels.size() * 2, 0.5f);
  auto put = [&](const std::string& folder, const std::string& name, NpyType type,
                 const std::vector<uint64_t>& shape, const std::string& raw) {
    std::filesystem::create_directories(scratch / folder);
    std::ofstream((scratch / folder / name).string(), std::ios::binary | std::ios::trunc)
        << NpyBytes(type, shape, raw);
  };
  auto make = [&](const std::string& folder) {
    put(folder, "train_x.npy", NpyType::kFloat32, {labels.size(), 2}, Raw(features));
    put(folder, "train_y.npy", NpyType::kInt64, {labels.size()}, Raw(labels));
    put(folder, "test_x.npy", NpyType::kFloat32, {2, 2}, Raw(std::vector<float>{1, 2, 3, 4}));
    put(folder, "test_y.npy", NpyType::kInt64, {2}, Raw(std::vector<int64_t>{0, 1}));
    return (scratch / folder).string();
  };
  const std::string a = make("a"), b = make("b");
  absl::StatusOr<std::string> first = DataIdentity(a);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->substr(0, first->rfind(' ')), "npy train 100000 test 2 x2");
  EXPECT_EQ(*DataIdentity(b), *first);  // the same files elsewhere
  const int64_t last = labels.back();
  labels.back() = (last + 1) % 3;  // the last row: in the file's last 64 KiB
  make("b");
  EXPECT_NE(*DataIdentity(b), *first);
  labels.back() = last;
  labels.front() = 1;  // the first row
  make("b");
  EXPECT_NE(*DataIdentity(b), *first);
  labels.front() = 0;
  make("b");
  EXPECT_EQ(*DataIdentity(b), *first);
  put("b", "test_y.npy", NpyType::kInt64, {2}, Raw(std::vector<int64_t>{1, 1}));
  EXPECT_NE(*DataIdentity(b), *first);

  absl::StatusOr<std::string> idx = DataIdentity(kDefaultDataDir);
  ASSERT_TRUE(idx.ok()) << idx.status();
  EXPECT_EQ(idx->substr(0, idx->rfind(' ')), "idx train 60000 test 10000");
  std::filesystem::create_directories(scratch / "empty");
  EXPECT_FALSE(DataIdentity((scratch / "empty").string()).ok());
}

}  // namespace
}  // namespace reckon::worker
