// Device and pinned host buffers, and the synchronous copy out that reads
// use: what the CUDA backend and the flat replica (cuda/cuda_flat_replica.h)
// hold their state in. Host C++ (nvcc never sees this header).
//
// Threading: a buffer is owned by one object and used on its thread.
#ifndef RECKON_CUDA_DEVICE_BUFFER_H_
#define RECKON_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "cuda/cuda_check.h"

namespace reckon::cuda {

enum class Memory { kDevice, kPinnedHost };

// A growable buffer in device memory or pinned host memory. Resize keeps
// nothing (callers refill); it allocates only when asked for more.
template <typename T, Memory kWhere>
class CudaBuffer {
 public:
  CudaBuffer() = default;
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  ~CudaBuffer() { Free(); }
  absl::Status Resize(size_t n) {
    if (n <= size_ && ptr_ != nullptr) return absl::OkStatus();
    Free();
    const size_t bytes = std::max<size_t>(n, 1) * sizeof(T);
    if constexpr (kWhere == Memory::kDevice) {
      RECKON_CUDA_RETURN_IF_ERROR(cudaMalloc(&ptr_, bytes));
    } else {
      RECKON_CUDA_RETURN_IF_ERROR(cudaMallocHost(&ptr_, bytes));
    }
    size_ = n;
    return absl::OkStatus();
  }
  T* get() const { return ptr_; }
  friend void swap(CudaBuffer& a, CudaBuffer& b) noexcept {
    std::swap(a.ptr_, b.ptr_);
    std::swap(a.size_, b.size_);
  }

 private:
  void Free() {
    if constexpr (kWhere == Memory::kDevice) {
      cudaFree(ptr_);
    } else {
      cudaFreeHost(ptr_);
    }
    ptr_ = nullptr;
    size_ = 0;
  }
  T* ptr_ = nullptr;
  size_t size_ = 0;
};
template <typename T>
using DeviceBuffer = CudaBuffer<T, Memory::kDevice>;
template <typename T>
using PinnedBuffer = CudaBuffer<T, Memory::kPinnedHost>;

// Copies `bytes` of device memory to the host on `stream` and waits: an
// error names `what` was being read (nothing of the host buffer is to be
// trusted then).
inline absl::Status CopyToHost(const void* device, void* host, size_t bytes, cudaStream_t stream,
                               const char* what) {
  cudaError_t err = cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, stream);
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream);
  return CudaStatus(err, absl::StrCat("reading ", what, " from the device").c_str(), __FILE__,
                    __LINE__);
}

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_BUFFER_H_
