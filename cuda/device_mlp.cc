#include "cuda/device_mlp.h"

#include <algorithm>
#include <utility>

#include "base/status_macros.h"
#include "cuda/cuda_check.h"
#include "cuda/kernels.h"

namespace reckon::cuda {
namespace {

int ActivationCode(model::Activation a) { return a == model::Activation::kRelu ? 1 : 2; }

}  // namespace

absl::Status DeviceMlp::Resize(int rows, Batch* b) const {
  if (b->capacity >= rows) return absl::OkStatus();
  RECKON_RETURN_IF_ERROR(b->h_loss.Resize(rows));
  RECKON_RETURN_IF_ERROR(b->h_correct.Resize(rows));
  RECKON_RETURN_IF_ERROR(b->row_loss.Resize(rows));
  RECKON_RETURN_IF_ERROR(b->row_correct.Resize(rows));
  b->pre.clear();
  b->post.clear();
  size_t widest = 0;
  for (const auto& l : shape_.layers()) {
    const size_t n = size_t(rows) * l.out;
    b->pre.push_back(std::make_unique<DeviceBuffer<float>>());
    b->post.push_back(std::make_unique<DeviceBuffer<float>>());
    RECKON_RETURN_IF_ERROR(b->pre.back()->Resize(n));
    RECKON_RETURN_IF_ERROR(b->post.back()->Resize(n));
    widest = std::max(widest, n);
  }
  RECKON_RETURN_IF_ERROR(b->delta.Resize(widest));
  RECKON_RETURN_IF_ERROR(b->delta_prev.Resize(widest));
  b->capacity = rows;
  return absl::OkStatus();
}

absl::Status DeviceMlp::Forward(const float* weights, const float* x, const int32_t* labels,
                                int rows, Batch* b, bool with_delta) const {
  const auto& layers = shape_.layers();
  const float* a = x;
  const float one = 1.0f, zero = 0.0f;
  for (size_t l = 0; l < layers.size(); ++l) {
    const model::LayerLayout& layer = layers[l];
    float* z = b->pre[l]->get();
    // z (rows x out, row-major) = a W^T: column-major z^T = W a^T.
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->sgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, layer.out, rows,
                                               layer.in, &one, weights + layer.weights, layer.in, a,
                                               layer.in, &zero, z, layer.out));
    const bool last = l + 1 == layers.size();
    RECKON_RETURN_IF_ERROR(
        LaunchBiasActivation(weights + layer.bias, z, b->post[l]->get(), rows, layer.out,
                             last ? 0 : ActivationCode(shape_.activation()), stream_));
    if (last) {
      RECKON_RETURN_IF_ERROR(LaunchSoftmaxCrossEntropy(
          z, labels, rows, layer.out, 1.0f / static_cast<float>(rows), b->post[l]->get(),
          with_delta ? b->delta.get() : nullptr, b->row_loss.get(), b->row_correct.get(), stream_));
    }
    a = b->post[l]->get();
  }
  return absl::OkStatus();
}

absl::Status DeviceMlp::Backward(const float* weights, const float* x, int rows, Batch* b,
                                 float* grad) const {
  const auto& layers = shape_.layers();
  const float one = 1.0f, zero = 0.0f;
  for (size_t l = layers.size(); l-- > 0;) {
    const model::LayerLayout& layer = layers[l];
    const float* a_in = l == 0 ? x : b->post[l - 1]->get();
    const float* d = b->delta.get();
    // dW (out x in) = d^T a_in: column-major dW^T (in x out) = a_in^T d.
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->sgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_T, layer.in,
                                               layer.out, rows, &one, a_in, layer.in, d, layer.out,
                                               &zero, grad + layer.weights, layer.in));
    RECKON_RETURN_IF_ERROR(LaunchBiasGradient(d, rows, layer.out, grad + layer.bias, stream_));
    if (l == 0) break;
    // d_prev (rows x in) = d W: column-major d_prev^T = W^T d^T.
    float* dp = b->delta_prev.get();
    RECKON_CUBLAS_RETURN_IF_ERROR(blas_->sgemm(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, layer.in, rows,
                                               layer.out, &one, weights + layer.weights, layer.in,
                                               d, layer.out, &zero, dp, layer.in));
    RECKON_RETURN_IF_ERROR(LaunchActivationBackward(b->pre[l - 1]->get(), b->post[l - 1]->get(), dp,
                                                    size_t(rows) * layer.in,
                                                    ActivationCode(shape_.activation()), stream_));
    using std::swap;  // DeviceBuffer's own
    swap(b->delta, b->delta_prev);
  }
  return absl::OkStatus();
}

absl::Status DeviceMlp::CopyStatsOut(int rows, Batch& b) const {
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      b.h_loss.get(), b.row_loss.get(), rows * sizeof(float), cudaMemcpyDeviceToHost, stream_));
  RECKON_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.h_correct.get(), b.row_correct.get(),
                                              rows * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                              stream_));
  return absl::OkStatus();
}

absl::StatusOr<model::BatchStats> DeviceMlp::SumStats(const Batch& b, int rows) const {
  RECKON_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
  model::BatchStats stats;
  for (int r = 0; r < rows; ++r) {
    stats.loss_sum += static_cast<double>(b.h_loss.get()[r]);
    stats.correct += b.h_correct.get()[r];
  }
  return stats;
}

}  // namespace reckon::cuda
