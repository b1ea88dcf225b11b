// Finding a CUDA device. The training backends (issue: CUDA backend) and the
// GPU tests start here: no device is a clear status, never a crash, so that
// `--backend auto` can fall back to the CPU and tests can skip saying why.
//
// Threads: functions, any thread. Errors: no device or driver kUnavailable,
// a CUDA error kInternal, each naming why.
#ifndef RECKON_CUDA_DEVICE_H_
#define RECKON_CUDA_DEVICE_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"

namespace reckon::cuda {

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  uint64_t global_memory_bytes = 0;
  int multiprocessors = 0;
  int driver_version = 0;  // e.g. 13000 for CUDA 13.0
  int runtime_version = 0;
};

// The CUDA device `ordinal` (the first by default). kUnavailable, with the
// driver's own words, when there is no driver or no such device; kInternal
// for any other CUDA error. Thread-safe.
absl::StatusOr<DeviceInfo> ProbeDevice(int ordinal = 0);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_H_
