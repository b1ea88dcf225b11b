// --backend: which training backend runs the step. The one place that knows
// every backend (cpu/, cuda/); its own library (reckon_backend_factory), so
// that neither backend depends on the other and the trainer on neither.
//
// Threads: called once, on the thread that then runs the training loop.
// Errors: an unknown or unavailable backend is kInvalidArgument, naming it
// and why (no GPU, no CUDA in this build).
#ifndef RECKON_WORKER_BACKEND_FACTORY_H_
#define RECKON_WORKER_BACKEND_FACTORY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "model/backend.h"

namespace reckon::worker {

// OK for auto, cpu and cuda; kInvalidArgument naming the value otherwise.
absl::Status CheckBackendName(const std::string& name);

// --backend auto|cpu|cuda. `auto` takes the GPU when one answers and the
// CPU otherwise; `*chosen` says which and why, for the log. A config the GPU
// cannot hold is an error for auto too (the CPU would take it, but the user
// asked for something no backend should silently change).
absl::StatusOr<std::unique_ptr<model::Backend>> MakeBackend(const std::string& name,
                                                            const model::BackendConfig& config,
                                                            std::string* chosen);

}  // namespace reckon::worker

#endif  // RECKON_WORKER_BACKEND_FACTORY_H_
