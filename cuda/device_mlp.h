// The MLP's passes on the device (model/model.h ModelShape): forward to
// per-row loss and hits, backward into a gradient, and the activations and
// deltas a batch needs. cuBLAS is column-major; a row-major matrix X (r x c)
// is the column-major X^T, so every row-major product is written
// transposed (device_mlp.cc).
//
// Threads: one caller, the backend's training or evaluation call; all work
// is enqueued on the stream it was made with (SumStats waits for it). Errors:
// a CUDA or cuBLAS failure, named (nothing of the batch is to be trusted).
#ifndef RECKON_CUDA_DEVICE_MLP_H_
#define RECKON_CUDA_DEVICE_MLP_H_

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "cuda/cublas_api.h"
#include "cuda/device_buffer.h"
#include "model/model.h"

namespace reckon::cuda {

class DeviceMlp {
 public:
  // What a pass computes beside its input: activations, deltas, per-row
  // loss and hits, for up to `capacity` rows.
  struct Batch {
    int capacity = 0;
    std::vector<std::unique_ptr<DeviceBuffer<float>>> pre, post;
    DeviceBuffer<float> delta, delta_prev;
    DeviceBuffer<float> row_loss;
    DeviceBuffer<int32_t> row_correct;
    PinnedBuffer<float> h_loss;
    PinnedBuffer<int32_t> h_correct;
  };

  // `blas` and `cublas` (set to `stream`) outlive this.
  DeviceMlp(model::ModelShape shape, const CublasApi* blas, cublasHandle_t cublas,
            cudaStream_t stream)
      : shape_(std::move(shape)), blas_(blas), cublas_(cublas), stream_(stream) {}

  // Grows `b` to hold `rows` (never shrinks).
  absl::Status Resize(int rows, Batch* b) const;
  // `rows` of `x` (rows x features) with their `labels`, on the device,
  // through the layers of `weights` (the replica's float copy): each row's
  // loss and hit in `b`, and with `with_delta` the loss's delta for Backward.
  absl::Status Forward(const float* weights, const float* x, const int32_t* labels, int rows,
                       Batch* b, bool with_delta) const;
  // The gradient of the mean loss of Forward's rows into `grad` (param_count
  // floats, overwritten); `b` holds what Forward left.
  absl::Status Backward(const float* weights, const float* x, int rows, Batch* b,
                        float* grad) const;
  // Enqueues the copy of each row's loss and hit to the pinned host side.
  absl::Status CopyStatsOut(int rows, Batch& b) const;
  // Waits for the stream and sums what CopyStatsOut copied.
  absl::StatusOr<model::BatchStats> SumStats(const Batch& b, int rows) const;

 private:
  const model::ModelShape shape_;
  const CublasApi* const blas_;
  const cublasHandle_t cublas_;
  const cudaStream_t stream_;
};

}  // namespace reckon::cuda

#endif  // RECKON_CUDA_DEVICE_MLP_H_
