// The MLP's forward and backward passes on the CPU, for float (training) and
// double (gradient checks). GEMMs go to OpenBLAS; the elementwise parts are
// plain loops. This is the CPU twin that the CUDA kernels are tested against.
//
// Threads: functions over the buffers given, any thread; OpenBLAS runs its
// own threads inside a GEMM. Errors: none (shapes are the caller's
// contract, checked by the CPU backend).
#ifndef RECKON_CPU_MLP_MATH_H_
#define RECKON_CPU_MLP_MATH_H_

#include <cstdint>
#include <functional>
#include <vector>

#include "model/model.h"

namespace reckon::cpu {

// Runs fn over chunks covering [0, n), possibly on several threads, and
// returns when all are done (the CPU backend passes its thread pool). The
// GEMMs are split by rows with it; null runs everything on the caller.
using RowParallelFor =
    std::function<void(size_t n, const std::function<void(size_t, size_t)>& fn)>;

// Buffers for one batch size, reused across steps (no allocation per step).
template <typename T>
struct MlpWorkspace {
  int batch = 0;
  std::vector<std::vector<T>> pre;   // per layer: z = a W^T + b   (batch x out)
  std::vector<std::vector<T>> post;  // per layer: activation(z), softmax at the end
  std::vector<T> delta, delta_prev;  // dL/dz of the current and previous layer
  void Resize(const model::ModelShape& shape, int batch_size);
};

// Forward pass only: `ws.post.back()` holds the softmax probabilities.
// REQUIRES: ws.Resize(shape, batch) was called with batch >= `batch`.
template <typename T>
model::BatchStats Forward(const model::ModelShape& shape, const T* params, const T* x, const int32_t* labels,
                   int batch, MlpWorkspace<T>& ws, const RowParallelFor* parallel = nullptr);

// Forward and backward: `grad` (param_count values) receives the gradient of
// the mean cross-entropy over the batch.
template <typename T>
model::BatchStats ForwardBackward(const model::ModelShape& shape, const T* params, const T* x,
                           const int32_t* labels, int batch, MlpWorkspace<T>& ws, T* grad,
                           const RowParallelFor* parallel = nullptr);

}  // namespace reckon::cpu

#endif  // RECKON_CPU_MLP_MATH_H_
