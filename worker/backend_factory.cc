#include "worker/backend_factory.h"

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "cpu/cpu_backend.h"
#if RECKON_HAVE_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace reckon::worker {

absl::Status CheckBackendName(const std::string& name) {
  if (name == "auto" || name == "cpu" || name == "cuda") return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("--backend '", name, "' is not auto, cpu or cuda"));
}

absl::StatusOr<std::unique_ptr<model::Backend>> MakeBackend(const std::string& name,
                                                            const model::BackendConfig& config,
                                                            std::string* chosen) {
  RECKON_RETURN_IF_ERROR(CheckBackendName(name));
  std::string gpu_reason;
#if RECKON_HAVE_CUDA
  if (name != "cpu") {
    absl::StatusOr<std::unique_ptr<model::Backend>> gpu = cuda::MakeCudaBackend(config);
    if (gpu.ok()) {
      *chosen = absl::StrCat((*gpu)->Describe(), name == "cuda" ? ", as asked" : ", found by auto");
      return gpu;
    }
    // A config the GPU cannot hold is the user's error either way; a
    // missing or failing device lets `auto` fall back.
    if (name == "cuda" || gpu.status().code() == absl::StatusCode::kInvalidArgument) {
      return absl::Status(gpu.status().code(),
                          absl::StrCat("--backend ", name, ": ", gpu.status().message()));
    }
    gpu_reason = std::string(gpu.status().message());
  }
#else
  gpu_reason = "this build has no CUDA support (nvcc was not found at build time)";
#endif
  if (name == "cuda") {
    return absl::UnavailableError(absl::StrCat("--backend cuda: ", gpu_reason));
  }
  RECKON_ASSIGN_OR_RETURN(std::unique_ptr<model::Backend> cpu, cpu::MakeCpuBackend(config));
  *chosen = name == "cpu"
                ? absl::StrCat(cpu->Describe(), ", as asked")
                : absl::StrCat(cpu->Describe(), ", falling back from the GPU: ", gpu_reason);
  return cpu;
}

}  // namespace reckon::worker
