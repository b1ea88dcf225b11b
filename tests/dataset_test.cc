#include "worker/dataset.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/test_process.h"

namespace reckon::worker {
namespace {

namespace fs = std::filesystem;

std::string Idx(uint8_t type, std::vector<uint32_t> dims, size_t data_bytes, uint8_t fill = 1) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (const uint32_t d : dims) {
    for (int b = 3; b >= 0; --b) s.push_back(static_cast<char>((d >> (8 * b)) & 0xFF));
  }
  s.append(data_bytes, static_cast<char>(fill));
  return s;
}

class IdxFiles : public ::testing::Test {
 protected:
  std::string Put(const std::string& name, const std::string& bytes, bool gzip = false) {
    const std::string path = (dir_ / name).string();
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary) << bytes;
    }
    return path;
  }
  ::reckon::testing::ScratchDir dir_;
};

TEST_F(IdxFiles, ReadsPlainAndGzipped) {
  for (const bool gz : {false, true}) {
    const std::string p = Put(gz ? "a.gz" : "a", Idx(8, {3, 2, 2}, 12, 7), gz);
    absl::StatusOr<IdxArray> a = ReadIdx(p, 3);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->dims, (std::vector<uint32_t>{3, 2, 2}));
    EXPECT_EQ(a->data, std::vector<uint8_t>(12, 7));
  }
}

TEST_F(IdxFiles, RejectsTruncatedExtendedWrongMagicWrongTypeWrongRank) {
  auto expect = [&](const std::string& bytes, const std::string& mentions, int rank = 3) {
    const std::string p = Put("f", bytes);
    absl::StatusOr<IdxArray> a = ReadIdx(p, rank);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(a.status().message().find(mentions), std::string::npos) << a.status();
    EXPECT_NE(a.status().message().find(p), std::string::npos) << "error must name the file";
  };
  expect(Idx(8, {3, 2, 2}, 11), "truncated");
  expect(Idx(8, {3, 2, 2}, 13), "file has 13");
  expect("\x01\x02\x08\x03", "bad magic");
  expect(Idx(0x0D, {3, 2, 2}, 12), "not unsigned byte");
  expect(Idx(8, {3, 2, 2}, 12), "3 dimensions, expected 1", 1);
  expect(std::string("\0\0\x08\x03\0\0", 6), "truncated IDX header");
  // A gzip stream cut in the middle.
  const std::string full = Put("g.gz", Idx(8, {100, 28, 28}, 78400), true);
  std::string gz;
  {
    std::ifstream in(full, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), {});
  }
  const std::string cut = Put("cut.gz", gz.substr(0, gz.size() / 2));
  EXPECT_FALSE(ReadIdx(cut, 3).ok());
}

TEST_F(IdxFiles, DatasetChecksCountsAndLabels) {
  Put("train-images-idx3-ubyte", Idx(8, {5, 2, 2}, 20, 255));
  Put("train-labels-idx1-ubyte", Idx(8, {4}, 4, 1));
  absl::StatusOr<Dataset> d = LoadIdxDataset(dir_.path().string(), "train");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("5 images but"), std::string::npos) << d.status();

  Put("train-labels-idx1-ubyte", Idx(8, {5}, 5, 10));
  d = LoadIdxDataset(dir_.path().string(), "train");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("label 10"), std::string::npos) << d.status();

  Put("train-labels-idx1-ubyte", Idx(8, {5}, 5, 3));
  d = LoadIdxDataset(dir_.path().string(), "train");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->size(), 5u);
  EXPECT_EQ(d->features(), 4);
  EXPECT_EQ(d->images[0], 1.0f);
  EXPECT_EQ(d->labels[4], 3);
}

TEST_F(IdxFiles, MissingFilesAndDirectoriesAreNamed) {
  absl::StatusOr<Dataset> d = LoadIdxDataset(dir_.path().string(), "train");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(d.status().message().find("train-images-idx3-ubyte"), std::string::npos);
  d = LoadIdxDataset((dir_ / "nope").string(), "train");
  EXPECT_EQ(d.status().code(), absl::StatusCode::kNotFound);
}

TEST(FashionMnist, RealFilesFromTheDebianPackageLoad) {
  // dataset-fashion-mnist is installed by deploy/install-deps.sh.
  absl::StatusOr<Dataset> train = LoadIdxDataset(kDefaultDataDir, "train");
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<Dataset> test = LoadIdxDataset(kDefaultDataDir, "t10k");
  ASSERT_TRUE(test.ok()) << test.status();
  EXPECT_EQ(train->size(), 60000u);
  EXPECT_EQ(test->size(), 10000u);
  EXPECT_EQ(train->rows, 28);
  EXPECT_EQ(train->cols, 28);
  std::vector<int> per_class(10, 0);
  for (const int32_t l : train->labels) ++per_class[l];
  for (const int c : per_class) EXPECT_EQ(c, 6000);  // Fashion-MNIST is balanced
}

TEST(Shards, DisjointCoveringBalancedAndDeterministic) {
  std::set<uint32_t> seen;
  for (int i = 0; i < 7; ++i) {
    absl::StatusOr<std::vector<uint32_t>> s = ShardIndices(1000, i, 7, 42);
    ASSERT_TRUE(s.ok());
    EXPECT_GE(s->size(), 142u);
    EXPECT_LE(s->size(), 143u);
    for (const uint32_t x : *s) EXPECT_TRUE(seen.insert(x).second) << "index " << x << " twice";
    EXPECT_EQ(*s, *ShardIndices(1000, i, 7, 42));
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_NE(*ShardIndices(1000, 0, 7, 42), *ShardIndices(1000, 0, 7, 43));
  EXPECT_FALSE(ShardIndices(1000, 7, 7, 1).ok());
  int a, b;
  EXPECT_TRUE(ParseShard("2/5", &a, &b).ok());
  EXPECT_EQ(a, 2);
  EXPECT_EQ(b, 5);
  EXPECT_FALSE(ParseShard("5/5", &a, &b).ok());
  EXPECT_FALSE(ParseShard("x", &a, &b).ok());
  EXPECT_FALSE(ParseShard("1/0", &a, &b).ok());
}

// Each feature on its own: a column's mean and deviation, a constant
// column left at deviation 1 (not divided by zero), and the standardized
// columns with mean 0 and deviation 1.
TEST(FeatureStats, EachFeatureIsStandardizedOnItsOwn) {
  Dataset ds;
  ds.rows = 1;
  ds.cols = 3;
  ds.images = {1, 1000, 7, 3, 3000, 7, 5, 2000, 7};
  ds.labels = {0, 1, 0};
  const FeatureStats stats = ComputeFeatureStats(ds);
  EXPECT_EQ(stats.mean, (std::vector<double>{3, 2000, 7}));
  EXPECT_NEAR(stats.stddev[0], std::sqrt(8.0 / 3), 1e-12);
  EXPECT_NEAR(stats.stddev[1], 1000 * std::sqrt(2.0 / 3), 1e-9);
  EXPECT_EQ(stats.stddev[2], 1.0);
  Standardize(stats, &ds);
  for (int j = 0; j < 3; ++j) {
    const double mean = (ds.images[j] + ds.images[3 + j] + ds.images[6 + j]) / 3.0;
    EXPECT_NEAR(mean, 0, 1e-6) << j;
  }
  EXPECT_NEAR(ds.images[0], -std::sqrt(1.5), 1e-6);
  EXPECT_NEAR(ds.images[4], std::sqrt(1.5), 1e-6);
  EXPECT_EQ(ds.images[2], 0.0f);
}

}  // namespace
}  // namespace reckon::worker
