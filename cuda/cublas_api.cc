#include "cuda/cublas_api.h"

#include <dlfcn.h>

#include <string>

namespace reckon::cuda {
namespace {

// dlsym into `*fn`; false (with the reason in `*why`) when the symbol is
// missing.
template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn, std::string* why) {
  void* symbol = ::dlsym(library, name);
  if (symbol == nullptr) {
    *why = absl::StrCat("no ", name, " in it");
    return false;
  }
  *fn = reinterpret_cast<Fn>(symbol);
  return true;
}

absl::StatusOr<const CublasApi*> Load() {
  const std::string library = absl::StrCat("libcublas.so.", CUBLAS_VER_MAJOR);
  // Kept open for the life of the process: handles and the functions below
  // must stay valid.
  void* handle = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    return absl::UnavailableError(absl::StrCat("cannot load cuBLAS (", library,
                                               "): ", why != nullptr ? why : "unknown reason"));
  }
  static CublasApi api;
  std::string why;
  if (!Resolve(handle, "cublasCreate_v2", &api.create, &why) ||
      !Resolve(handle, "cublasDestroy_v2", &api.destroy, &why) ||
      !Resolve(handle, "cublasSetStream_v2", &api.set_stream, &why) ||
      !Resolve(handle, "cublasSetMathMode", &api.set_math_mode, &why) ||
      !Resolve(handle, "cublasSgemm_v2", &api.sgemm, &why) ||
      !Resolve(handle, "cublasGetStatusName", &api.status_name, &why) ||
      !Resolve(handle, "cublasGetStatusString", &api.status_string, &why)) {
    return absl::UnavailableError(absl::StrCat("cuBLAS (", library, ") is not usable: ", why));
  }
  return &api;
}

}  // namespace

absl::StatusOr<const CublasApi*> Cublas() {
  static const absl::StatusOr<const CublasApi*> loaded = Load();
  return loaded;
}

absl::Status CublasStatus(cublasStatus_t err, const char* what, const char* file, int line) {
  if (err == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  // A status comes from a call through the loaded library, so it is there.
  absl::StatusOr<const CublasApi*> api = Cublas();
  const std::string words =
      api.ok() ? absl::StrCat((*api)->status_name(err), ": ", (*api)->status_string(err))
               : absl::StrCat("cuBLAS status ", static_cast<int>(err));
  return absl::InternalError(absl::StrCat(what, " failed at ", file, ":", line, ": ", words));
}

}  // namespace reckon::cuda
