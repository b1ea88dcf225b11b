// cuBLAS, loaded with dlopen on first use instead of linked. Linking it made
// every reckon-worker and reckonctl process map and relocate libcublasLt
// (hundreds of MB) at start, GPU or not: 0.38 s and 231 MB resident for
// `reckon-worker --help` against 0.03 s and 15 MB without (this VM, session
// 4). Now only a process that builds the CUDA backend (or runs `bench gpu`)
// pays, once.
//
// Host C++ only (nvcc-compiled files do not call cuBLAS).
//
// Threads: loaded once (thread-safe); each handle is one thread's. Errors:
// no libcublas is kUnavailable, naming what was looked for.
#ifndef RECKON_CUDA_CUBLAS_API_H_
#define RECKON_CUDA_CUBLAS_API_H_

#include <cublas_v2.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace reckon::cuda {

// The cuBLAS entry points reckon calls, with the library's own signatures
// (cublasCreate and friends are macros for the _v2 names).
struct CublasApi {
  decltype(&::cublasCreate_v2) create;
  decltype(&::cublasDestroy_v2) destroy;
  decltype(&::cublasSetStream_v2) set_stream;
  decltype(&::cublasSetMathMode) set_math_mode;
  decltype(&::cublasSgemm_v2) sgemm;
  decltype(&::cublasGetStatusName) status_name;
  decltype(&::cublasGetStatusString) status_string;
};

// The process's cuBLAS (libcublas.so.<major of the headers>), loaded once;
// thread-safe. kUnavailable naming the library and the loader's reason when
// it cannot be opened or lacks an entry point (the same answer every call).
absl::StatusOr<const CublasApi*> Cublas();

// A failed cuBLAS call as a Status naming the call, the file:line and
// cuBLAS's own words.
absl::Status CublasStatus(cublasStatus_t err, const char* what, const char* file, int line);

}  // namespace reckon::cuda

// Evaluates a cublasStatus_t expression; returns a Status from the enclosing
// function when it is not CUBLAS_STATUS_SUCCESS.
#define RECKON_CUBLAS_RETURN_IF_ERROR(expr)                              \
  do {                                                                   \
    const absl::Status reckon_cublas_status_ =                           \
        ::reckon::cuda::CublasStatus((expr), #expr, __FILE__, __LINE__); \
    if (!reckon_cublas_status_.ok()) return reckon_cublas_status_;       \
  } while (0)

#endif  // RECKON_CUDA_CUBLAS_API_H_
