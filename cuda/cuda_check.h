// Error checks for every CUDA runtime and kernel-launch call (cuBLAS's are in
// cuda/cublas_api.h): each
// failure becomes an absl::Status naming the call, the file:line and CUDA's
// own words, returned to the caller (errors are values, never aborts). A sticky
// error (the context is lost) is reported the same way; the backend that
// sees one is unusable and says so on every later call.
//
// Threads: functions, any thread.
#ifndef RECKON_CUDA_CUDA_CHECK_H_
#define RECKON_CUDA_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace reckon::cuda {

inline absl::Status CudaStatus(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, " failed at ", file, ":", line, ": ",
                                          cudaGetErrorName(err), ": ", cudaGetErrorString(err)));
}

}  // namespace reckon::cuda

// Evaluates a cudaError_t expression; returns a Status from the enclosing
// function when it is not cudaSuccess.
#define RECKON_CUDA_RETURN_IF_ERROR(expr)                              \
  do {                                                                 \
    const absl::Status reckon_cuda_status_ =                           \
        ::reckon::cuda::CudaStatus((expr), #expr, __FILE__, __LINE__); \
    if (!reckon_cuda_status_.ok()) return reckon_cuda_status_;         \
  } while (0)

// After a kernel launch: a bad configuration shows up here, at the launch,
// not at the next synchronization.
// `what` is a string literal naming the kernel.
#define RECKON_CUDA_RETURN_IF_LAUNCH_FAILED(what)                                              \
  do {                                                                                         \
    const absl::Status reckon_launch_status_ =                                                 \
        ::reckon::cuda::CudaStatus(cudaGetLastError(), "launch of " what, __FILE__, __LINE__); \
    if (!reckon_launch_status_.ok()) return reckon_launch_status_;                             \
  } while (0)

#endif  // RECKON_CUDA_CUDA_CHECK_H_
