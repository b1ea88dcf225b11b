// The CUDA training backend (worker/backend.h) and its factory. Host C++20
// (this header is never seen by nvcc).
#ifndef RECKON_CUDA_CUDA_BACKEND_H_
#define RECKON_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "worker/backend.h"

namespace reckon::cuda {

// kUnavailable (the probe's words) when there is no usable device;
// kInvalidArgument for a config it cannot hold; kInternal for CUDA or cuBLAS
// failures, naming the call.
absl::StatusOr<std::unique_ptr<worker::Backend>> MakeCudaBackend(
    const worker::BackendConfig& config);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_CUDA_BACKEND_H_
