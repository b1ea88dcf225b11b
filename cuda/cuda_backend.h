// The CUDA training backend (model/backend.h): the replica, residual and
// optimizer state in device memory, cuBLAS GEMMs, the fused threshold pass
// (CUB). The same shape as cpu/cpu_backend.h; worker/backend_factory.h
// chooses between them. Host C++20 (this header is never seen by nvcc).
//
// Threads: a Backend is the training thread's alone. Errors: no device or
// no CUDA kUnavailable, a shape it cannot run kInvalidArgument, a CUDA
// error kInternal naming the call (the backend is then unusable).
#ifndef RECKON_CUDA_CUDA_BACKEND_H_
#define RECKON_CUDA_CUDA_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace reckon::cuda {

// kUnavailable (the probe's words) when there is no usable device;
// kInvalidArgument for a config it cannot hold; kInternal for CUDA or cuBLAS
// failures, naming the call.
absl::StatusOr<std::unique_ptr<model::Backend>> MakeCudaBackend(
    const model::BackendConfig& config);

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_CUDA_BACKEND_H_
