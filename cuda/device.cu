#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "cuda/device.h"

namespace reckon::cuda {

absl::StatusOr<DeviceInfo> ProbeDevice(int ordinal) {
  DeviceInfo info;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later callers
    if (err == cudaErrorInsufficientDriver) {
      // The runtime says "insufficient" both when the driver is old and when
      // there is none at all; the driver version tells which.
      int driver = 0;
      cudaDriverGetVersion(&driver);
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      if (driver == 0) {
        return absl::UnavailableError(
            "no CUDA device: no NVIDIA driver is installed (libcuda.so not found)");
      }
      return absl::UnavailableError(absl::StrCat("no CUDA device: the NVIDIA driver supports CUDA ",
                                                 driver / 1000, ".", (driver % 1000) / 10,
                                                 ", older than this build's runtime ",
                                                 runtime / 1000, ".", (runtime % 1000) / 10));
    }
    if (err == cudaErrorNoDevice) {
      return absl::UnavailableError(absl::StrCat("no CUDA device: ", cudaGetErrorString(err)));
    }
    return absl::UnavailableError(
        absl::StrCat("CUDA unavailable: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
  }
  if (count == 0) return absl::UnavailableError("no CUDA device found");
  if (ordinal < 0 || ordinal >= count) {
    return absl::UnavailableError(
        absl::StrCat("no CUDA device ", ordinal, ": this machine has ", count));
  }
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, ordinal);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return absl::InternalError(absl::StrCat("cudaGetDeviceProperties: ", cudaGetErrorString(err)));
  }
  info.ordinal = ordinal;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.multiprocessors = prop.multiProcessorCount;
  cudaDriverGetVersion(&info.driver_version);
  cudaRuntimeGetVersion(&info.runtime_version);
  return info;
}

}  // namespace reckon::cuda
