// The CPU training backend (model/backend.h): the replica in host memory,
// OpenBLAS GEMMs split over a thread pool of its own, plain loops for the
// rest. The same shape as cuda/cuda_backend.h; worker/backend_factory.h
// chooses between them.
#ifndef RECKON_CPU_CPU_BACKEND_H_
#define RECKON_CPU_CPU_BACKEND_H_

#include <memory>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace reckon::cpu {

// kInvalidArgument for a config it cannot hold (no batch, a replica too
// large for the grid). config.threads = 0 takes every core.
absl::StatusOr<std::unique_ptr<model::Backend>> MakeCpuBackend(
    const model::BackendConfig& config);

}  // namespace reckon::cpu

#endif  // RECKON_CPU_CPU_BACKEND_H_
