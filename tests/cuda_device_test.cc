// The CUDA probe must answer on every machine: a device's facts where there
// is a GPU, a clear kUnavailable where there is none (CI, developer machines),
// never a crash.
#include <gtest/gtest.h>

#include "cuda/device.h"

namespace reckon::cuda {
namespace {

TEST(CudaDevice, ProbeAnswersClearlyWithOrWithoutAGpu) {
  const absl::StatusOr<DeviceInfo> info = ProbeDevice();
  if (!info.ok()) {
    EXPECT_EQ(info.status().code(), absl::StatusCode::kUnavailable) << info.status();
    EXPECT_FALSE(info.status().message().empty());
    GTEST_SKIP() << "no GPU here, device checks skipped: " << info.status().message();
  }
  EXPECT_FALSE(info->name.empty());
  EXPECT_GT(info->global_memory_bytes, uint64_t{1} << 30);
  EXPECT_GE(info->compute_major * 10 + info->compute_minor, 75);  // CUDA 13's floor
  EXPECT_GT(info->multiprocessors, 0);
  EXPECT_GE(info->driver_version, info->runtime_version) << "driver older than the runtime";
  std::printf("GPU: %s, sm_%d%d, %d SMs, %.1f GiB, driver %d, runtime %d\n", info->name.c_str(),
              info->compute_major, info->compute_minor, info->multiprocessors,
              info->global_memory_bytes / double(1ull << 30), info->driver_version,
              info->runtime_version);
}

}  // namespace
}  // namespace reckon::cuda
