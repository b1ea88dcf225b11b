// worker/npy_dataset.h: a folder of .npy files found, checked whole and read,
// shards included; every fault refused naming the file.
#include "worker/npy_dataset.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "base/process.h"
#include "tests/test_process.h"
#include "worker/data_identity.h"
#include "worker/npy.h"
#include "worker/samples.h"

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

// A mapped split (samples.h) gives what the split read into memory gives, bit
// for bit: the same statistics (the same sums in the same order), the same
// standardized floats for every row gathered, the same labels; and what the
// trainer says it will need next is read ahead.
TEST(NpyDataset, MappedRowsAreTheInMemoryRowsBitForBit) {
  NpyFolder f;
  constexpr uint64_t kFeatures = 7;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> value(-40, 300);
  std::vector<uint16_t> halves(400 * kFeatures);
  for (uint16_t& h : halves) h = static_cast<uint16_t>(0x3C00 + rng() % 0x1000);  // 1 .. 2^4
  std::vector<uint8_t> bytes(300 * kFeatures);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<float> floats(500 * kFeatures);
  for (float& x : floats) x = value(rng);
  auto labels = [&](size_t n) {
    std::vector<int64_t> y(n);
    for (int64_t& l : y) l = static_cast<int64_t>(rng() % 4);
    return y;
  };
  f.Put<uint16_t>("train_x-00000.npy", NpyType::kFloat16, {400, kFeatures}, halves);
  f.Put<int64_t>("train_y-00000.npy", NpyType::kInt64, {400}, labels(400));
  f.Put<uint8_t>("train_x-00001.npy", NpyType::kUint8, {300, kFeatures}, bytes);
  f.Put<int64_t>("train_y-00001.npy", NpyType::kInt64, {300}, labels(300));
  f.Put<float>("train_x-00002.npy", NpyType::kFloat32, {500, kFeatures}, floats);
  f.Put<int64_t>("train_y-00002.npy", NpyType::kInt64, {500}, labels(500));
  f.Put<float>("test_x.npy", NpyType::kFloat32, {90, kFeatures},
               std::vector<float>(floats.begin(), floats.begin() + 90 * kFeatures));
  f.Put<int64_t>("test_y.npy", NpyType::kInt64, {90}, labels(90));

  absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
  ASSERT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<Dataset> train = LoadNpyDataset(*shape, "train", 4);
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<Dataset> test = LoadNpyDataset(*shape, "test", 4);
  ASSERT_TRUE(test.ok()) << test.status();
  const FeatureStats in_memory = ComputeFeatureStats(*train);
  MappedSplitScan scan;
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> mapped =
      MappedNpySamples::Open(*shape, "train", 4, &scan);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> mapped_test =
      MappedNpySamples::Open(*shape, "test", 4);
  ASSERT_TRUE(mapped_test.ok()) << mapped_test.status();
  EXPECT_EQ(scan.rows, 1200u);
  EXPECT_EQ(scan.stats.mean, in_memory.mean);
  EXPECT_EQ(scan.stats.stddev, in_memory.stddev);
  const InputTransform t = TransformOf(in_memory);
  Standardize(t, &*train);
  Standardize(t, &*test);
  (*mapped)->SetTransform(t);
  (*mapped_test)->SetTransform(t);
  const InMemorySamples memory(*train), memory_test(*test);
  ASSERT_EQ((*mapped)->size(), memory.size());
  ASSERT_EQ((*mapped)->features(), memory.features());

  std::vector<uint32_t> order(memory.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  SeededShuffle(order, 11);
  std::vector<float> x_mapped(order.size() * kFeatures), x_memory(order.size() * kFeatures);
  std::vector<int32_t> y_mapped(order.size()), y_memory(order.size());
  ASSERT_TRUE((*mapped)->Gather(order, x_mapped.data(), y_mapped.data()).ok());
  ASSERT_TRUE(memory.Gather(order, x_memory.data(), y_memory.data()).ok());
  EXPECT_EQ(std::memcmp(x_mapped.data(), x_memory.data(), x_mapped.size() * sizeof(float)), 0);
  EXPECT_EQ(y_mapped, y_memory);
  std::vector<float> t_mapped(90 * kFeatures), t_memory(90 * kFeatures);
  std::vector<int32_t> l_mapped(90), l_memory(90);
  ASSERT_TRUE((*mapped_test)->Range(0, 90, t_mapped.data(), l_mapped.data()).ok());
  ASSERT_TRUE(memory_test.Range(0, 90, t_memory.data(), l_memory.data()).ok());
  EXPECT_EQ(std::memcmp(t_mapped.data(), t_memory.data(), t_mapped.size() * sizeof(float)), 0);
  EXPECT_EQ(l_mapped, l_memory);
}

// The kilobytes of `path` this process has mapped and resident
// (/proc/self/smaps' Rss, summed over its mappings of the file).
uint64_t ResidentMappedKiB(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_file = false;
  uint64_t kib = 0;
  while (std::getline(smaps, line)) {
    // A mapping's first line: "start-end perms offset dev inode [path]".
    if (!line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
        line.find('-') < line.find(' ')) {
      in_file = line.size() >= path.size() &&
                line.compare(line.size() - path.size(), path.size(), path) == 0;
    } else if (in_file && line.rfind("Rss:", 0) == 0) {
      kib += std::stoull(line.substr(4));
    }
  }
  return kib;
}

// Where this process maps `path` (/proc/self/maps), or {nullptr, 0}.
std::pair<char*, size_t> MappingOf(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() < path.size() ||
        line.compare(line.size() - path.size(), path.size(), path) != 0) {
      continue;
    }
    const uintptr_t start = std::stoull(line.substr(0, line.find('-')), nullptr, 16);
    const uintptr_t end = std::stoull(line.substr(line.find('-') + 1), nullptr, 16);
    return {reinterpret_cast<char*>(start), end - start};
  }
  return {nullptr, 0};
}

// While the rows asked for are not in the page cache, they are read with
// pread, not through the mapping: the kernel drops a page cache page at
// once, but reclaims a mapped one with a walk of its mappings and a TLB
// shootdown; under a memory limit of a quarter of the data that was a
// quarter of the worker's samples and a 3.6x slower epoch. While they are
// (the data fits), through the mapping: a system call a row cost 0.53x
// there. The same floats either way (docs/benchmarks.md "A dataset larger
// than memory").
TEST(NpyDataset, RowsNotInThePageCacheAreReadWithoutMappingThem) {
  NpyFolder f;
  constexpr uint64_t kRows = 4000, kFeatures = 640;  // 2.4 MiB of uint8 features
  std::vector<uint8_t> bytes(kRows * kFeatures);
  std::mt19937 rng(5);
  for (uint8_t& b : bytes) b = static_cast<uint8_t>(rng());
  std::vector<int64_t> labels(kRows);
  for (uint64_t i = 0; i < kRows; ++i) labels[i] = static_cast<int64_t>(i % 10);
  f.Put<uint8_t>("train_x.npy", NpyType::kUint8, {kRows, kFeatures}, bytes);
  f.Put<int64_t>("train_y.npy", NpyType::kInt64, {kRows}, labels);
  f.Put<uint8_t>("test_x.npy", NpyType::kUint8, {kRows, kFeatures}, bytes);
  f.Put<int64_t>("test_y.npy", NpyType::kInt64, {kRows}, labels);
  absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
  ASSERT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> train =
      MappedNpySamples::Open(*shape, "train", 10);
  ASSERT_TRUE(train.ok()) << train.status();
  const std::string x_path = f.dir() + "/train_x.npy";
  const uint64_t data_kib = bytes.size() / 1024;
  std::vector<uint32_t> order(kRows);
  for (uint32_t i = 0; i < kRows; ++i) order[i] = i;
  SeededShuffle(order, 7);
  std::vector<float> x(kRows * kFeatures), x_again(kRows * kFeatures);
  std::vector<int32_t> y(kRows), y_again(kRows);

  // Just written and checked: cached, read through the mapping.
  ASSERT_TRUE((*train)->reads_through_mapping());
  ASSERT_TRUE((*train)->Gather(order, x.data(), y.data()).ok());
  EXPECT_EQ(x[kFeatures * 3 + 5], float(bytes[size_t(order[3]) * kFeatures + 5]));
  EXPECT_EQ(y[3], labels[order[3]]);
  EXPECT_GE(ResidentMappedKiB(x_path), data_kib);

  // Memory pressure: the kernel reclaims the pages. The read-ahead finds
  // the next rows missing (a row in 16 looked up), and the rows are read.
  // Written back first: a dirty page is not reclaimed.
  for (const std::string name : {"train_x.npy", "test_x.npy"}) {
    const int fd = open((f.dir() + "/" + name).c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(fdatasync(fd), 0);
    close(fd);
  }
  const auto [at, length] = MappingOf(x_path);
  ASSERT_NE(at, nullptr);
  ASSERT_EQ(madvise(at, length, MADV_PAGEOUT), 0) << std::strerror(errno);
  EXPECT_LE(ResidentMappedKiB(x_path), 8u);
  // Rows asked for 16 at a time (one looked up), none twice, each batch
  // taken before the next: the first one looked up is missing, and the
  // share found cached (0.9 then) cannot climb back to 0.95 in the few
  // look-ups these rows make. Then every row is asked for.
  const std::span<const uint32_t> rows(order);
  size_t asked = 0;
  auto ask = [&](size_t count) {
    const uint64_t before = (*train)->pages_read_ahead();
    (*train)->WillNeed(rows.subspan(asked, count));
    asked += count;
    return before;
  };
  auto wait_until = [&](auto done, std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done() && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return done();
  };
  while ((*train)->reads_through_mapping() && asked + 16 <= kRows / 2) {
    const uint64_t before = ask(16);
    wait_until([&] { return (*train)->pages_read_ahead() > before; }, std::chrono::seconds(1));
  }
  ASSERT_FALSE((*train)->reads_through_mapping()) << asked << " rows asked for";
  const uint64_t before = ask(64);
  ASSERT_TRUE(wait_until([&] { return (*train)->pages_read_ahead() >= before + 64; }))
      << "a page of features a row at least: " << (*train)->pages_read_ahead() - before;
  ASSERT_FALSE((*train)->reads_through_mapping());
  ASSERT_TRUE((*train)->Gather(order, x_again.data(), y_again.data()).ok());
  EXPECT_EQ(std::memcmp(x.data(), x_again.data(), x.size() * sizeof(float)), 0);
  EXPECT_EQ(y, y_again);
  EXPECT_LE(ResidentMappedKiB(x_path), 8u) << "of " << data_kib << " KiB read";

  // Read ahead and read, the rows are cached again: through the mapping.
  ASSERT_TRUE(wait_until([&] {
    (*train)->WillNeed(order);
    return (*train)->reads_through_mapping();
  }));
  ASSERT_TRUE((*train)->Gather(order, x_again.data(), y_again.data()).ok());
  EXPECT_EQ(std::memcmp(x.data(), x_again.data(), x.size() * sizeof(float)), 0);

  // The test split, read in order, is always read: the same floats.
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> test =
      MappedNpySamples::Open(*shape, "test", 10);
  ASSERT_TRUE(test.ok()) << test.status();
  const std::string test_path = f.dir() + "/test_x.npy";
  const auto [test_at, test_length] = MappingOf(test_path);
  ASSERT_EQ(madvise(test_at, test_length, MADV_PAGEOUT), 0) << std::strerror(errno);
  ASSERT_TRUE((*test)->Range(0, kRows, x_again.data(), y_again.data()).ok());
  EXPECT_LE(ResidentMappedKiB(test_path), 8u);
  for (size_t b = 0; b < kRows; ++b) {
    ASSERT_EQ(std::memcmp(&x[b * kFeatures], &x_again[size_t(order[b]) * kFeatures],
                          kFeatures * sizeof(float)),
              0)
        << "row " << order[b];
    ASSERT_EQ(y[b], y_again[order[b]]);
  }
}

// A file cut after the start's check: a read of its lost rows is refused
// naming the file and the rows (through a mapping it was a SIGBUS); the
// labels, kept from the check, need their file no more.
TEST(NpyDataset, AFileCutAfterItsCheckIsRefusedNamingIt) {
  NpyFolder f;
  constexpr uint64_t kRows = 100, kFeatures = 50;
  std::vector<float> values(kRows * kFeatures);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i % 97);
  std::vector<int64_t> labels(kRows);
  for (uint64_t i = 0; i < kRows; ++i) labels[i] = static_cast<int64_t>(i % 3);
  f.Put<float>("train_x.npy", NpyType::kFloat32, {kRows, kFeatures}, values);
  f.Put<int64_t>("train_y.npy", NpyType::kInt64, {kRows}, labels);
  f.Put<float>("test_x.npy", NpyType::kFloat32, {kRows, kFeatures}, values);
  f.Put<int64_t>("test_y.npy", NpyType::kInt64, {kRows}, labels);
  absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
  ASSERT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> train =
      MappedNpySamples::Open(*shape, "train", 3);
  ASSERT_TRUE(train.ok()) << train.status();
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> test =
      MappedNpySamples::Open(*shape, "test", 3);
  ASSERT_TRUE(test.ok()) << test.status();
  const std::string train_x = f.dir() + "/train_x.npy", test_x = f.dir() + "/test_x.npy";
  const uint64_t half = std::filesystem::file_size(train_x) - kRows / 2 * kFeatures * 4;
  std::filesystem::resize_file(train_x, half);
  std::filesystem::resize_file(test_x, half);
  std::filesystem::resize_file(f.dir() + "/train_y.npy", 0);

  std::vector<float> x(kRows * kFeatures);
  std::vector<int32_t> y(kRows);
  const std::vector<uint32_t> lost = {3, 50};
  // The test split is read with pread: the rows before the cut still are.
  ASSERT_TRUE((*test)->Range(0, 50, x.data(), y.data()).ok());
  EXPECT_EQ(y[49], 49 % 3);
  EXPECT_EQ(x[49 * kFeatures + 1], float((49 * kFeatures + 1) % 97));
  // Cached: read through the mapping, where the file's size is checked.
  ASSERT_TRUE((*train)->reads_through_mapping());
  absl::Status s = (*train)->Gather(lost, x.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(train_x + ": now "), std::string::npos) << s;
  EXPECT_NE(s.message().find("it was cut or rewritten since"), std::string::npos) << s;
  s = (*test)->Range(40, 20, x.data(), y.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_NE(s.message().find(test_x + ": rows 40 to 59"), std::string::npos) << s;
}

// A mapped split keeps a descriptor open a feature file: more shards than
// the soft limit of open files is refused naming the remedy, and the
// worker raises its soft limit to the hard one at its start
// (base::RaiseOpenFileLimit), where they open.
TEST(NpyDataset, ShardsBeyondTheOpenFileLimitAreRefusedUntilItIsRaised) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  const auto fds = std::filesystem::directory_iterator("/proc/self/fd");
  const int open_now = int(std::distance(begin(fds), end(fds)));
  constexpr int kShards = 48;
  if (before.rlim_max < rlim_t(open_now + kShards + 16)) {
    GTEST_SKIP() << "the hard limit of open files (" << before.rlim_max << ") is too low here";
  }
  NpyFolder f;
  for (int i = 0; i < kShards; ++i) {
    const std::string n = absl::StrFormat("%05d", i);
    f.Put<float>("train_x-" + n + ".npy", NpyType::kFloat32, {2, 2}, {0, 1, 2, float(i)});
    f.Put<int64_t>("train_y-" + n + ".npy", NpyType::kInt64, {2}, {0, 1});
  }
  f.Put<float>("test_x.npy", NpyType::kFloat32, {1, 2}, {0, 1});
  f.Put<int64_t>("test_y.npy", NpyType::kInt64, {1}, {1});
  absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
  ASSERT_TRUE(shape.ok()) << shape.status();
  rlimit low = before;
  low.rlim_cur = rlim_t(open_now + kShards / 2);
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> refused =
      MappedNpySamples::Open(*shape, "train", 2);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_NE(refused.status().message().find("raise `ulimit -n`"), std::string::npos)
      << refused.status();
  EXPECT_EQ(base::RaiseOpenFileLimit(), uint64_t(before.rlim_max));
  absl::StatusOr<std::unique_ptr<MappedNpySamples>> opened =
      MappedNpySamples::Open(*shape, "train", 2);
  ASSERT_TRUE(opened.ok()) << opened.status();
  EXPECT_EQ((*opened)->size(), size_t(2 * kShards));
  opened->reset();
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
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
    // A mapped dataset (samples.h) refuses the same files with the same words.
    const absl::Status mapped = [&]() -> absl::Status {
      absl::StatusOr<NpyDatasetShape> shape = InspectNpyDataset(f.dir());
      if (!shape.ok()) return shape.status();
      absl::StatusOr<std::unique_ptr<MappedNpySamples>> split =
          MappedNpySamples::Open(*shape, "train", 5);
      if (!split.ok()) return split.status();
      return MappedNpySamples::Open(*shape, "test", 5).status();
    }();
    EXPECT_EQ(mapped.message(), s.message());
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
