#include "cpu/mlp_math.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace reckon::cpu {
namespace {

// C (m x n) = alpha * op(A) op(B) + beta * C, all row-major.
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void Gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// fn(begin, end) over [0, n), split by `parallel` when there is one.
void Rows(const RowParallelFor* parallel, size_t n, const std::function<void(size_t, size_t)>& fn) {
  if (parallel != nullptr && *parallel) {
    (*parallel)(n, fn);
  } else {
    fn(0, n);
  }
}

// z = a W^T + b for every row; a: batch x in, W: out x in, z: batch x out.
// Split by batch rows.
template <typename T>
void Affine(const model::LayerLayout& l, const T* params, const T* a, int batch, T* z,
            const RowParallelFor* parallel) {
  const T* bias = params + l.bias;
  Rows(parallel, batch, [&](size_t begin, size_t end) {
    for (size_t r = begin; r < end; ++r) std::memcpy(z + r * l.out, bias, sizeof(T) * l.out);
    Gemm(false, true, int(end - begin), l.out, l.in, T(1), a + begin * l.in, l.in,
         params + l.weights, l.in, T(1), z + begin * l.out, l.out);
  });
}

// Softmax of each row of `z` into `p`; returns the loss sum and counts hits.
template <typename T>
model::BatchStats SoftmaxCrossEntropy(const T* z, const int32_t* labels, int batch, int classes, T* p) {
  model::BatchStats stats;
  for (int r = 0; r < batch; ++r) {
    const T* zr = z + size_t(r) * classes;
    T* pr = p + size_t(r) * classes;
    const int best = static_cast<int>(std::max_element(zr, zr + classes) - zr);
    const T max = zr[best];
    T sum = 0;
    for (int c = 0; c < classes; ++c) sum += (pr[c] = std::exp(zr[c] - max));
    for (int c = 0; c < classes; ++c) pr[c] /= sum;
    // -log p_y computed from the logits, stable for tiny p_y.
    stats.loss_sum += static_cast<double>(std::log(sum) - (zr[labels[r]] - max));
    stats.correct += best == labels[r];
  }
  return stats;
}

}  // namespace

template <typename T>
void MlpWorkspace<T>::Resize(const model::ModelShape& shape, int batch_size) {
  if (batch_size <= batch && pre.size() == shape.layers().size()) return;
  batch = batch_size;
  pre.assign(shape.layers().size(), {});
  post.assign(shape.layers().size(), {});
  size_t widest = 0;
  for (size_t l = 0; l < shape.layers().size(); ++l) {
    const size_t n = size_t(batch) * shape.layers()[l].out;
    pre[l].resize(n);
    post[l].resize(n);
    widest = std::max(widest, n);
  }
  delta.resize(widest);
  delta_prev.resize(widest);
}

template <typename T>
model::BatchStats Forward(const model::ModelShape& shape, const T* params, const T* x, const int32_t* labels,
                   int batch, MlpWorkspace<T>& ws, const RowParallelFor* parallel) {
  const auto& layers = shape.layers();
  const T* a = x;
  model::BatchStats stats;
  for (size_t l = 0; l < layers.size(); ++l) {
    T* z = ws.pre[l].data();
    T* out = ws.post[l].data();
    Affine(layers[l], params, a, batch, z, parallel);
    const size_t n = size_t(batch) * layers[l].out;
    if (l + 1 == layers.size()) {
      stats = SoftmaxCrossEntropy(z, labels, batch, layers[l].out, out);
    } else if (shape.activation() == model::Activation::kRelu) {
      for (size_t i = 0; i < n; ++i) out[i] = z[i] > T(0) ? z[i] : T(0);
    } else {
      for (size_t i = 0; i < n; ++i) out[i] = T(1) / (T(1) + std::exp(-z[i]));
    }
    a = out;
  }
  return stats;
}

template <typename T>
model::BatchStats ForwardBackward(const model::ModelShape& shape, const T* params, const T* x,
                           const int32_t* labels, int batch, MlpWorkspace<T>& ws, T* grad,
                           const RowParallelFor* parallel) {
  const model::BatchStats stats = Forward(shape, params, x, labels, batch, ws, parallel);
  const auto& layers = shape.layers();
  const size_t last = layers.size() - 1;
  // dL/dz at the output: (softmax - onehot) / batch, for the mean loss.
  {
    const int classes = layers[last].out;
    const T* p = ws.post[last].data();
    T* d = ws.delta.data();
    const T inv = T(1) / T(batch);
    for (int r = 0; r < batch; ++r) {
      for (int c = 0; c < classes; ++c) {
        const size_t i = size_t(r) * classes + c;
        d[i] = (p[i] - (c == labels[r] ? T(1) : T(0))) * inv;
      }
    }
  }
  for (size_t l = last + 1; l-- > 0;) {
    const model::LayerLayout& layer = layers[l];
    const T* a_in = l == 0 ? x : ws.post[l - 1].data();
    const T* d = ws.delta.data();
    // dW = delta^T a_in (out x in), split by output rows; db = column sums.
    Rows(parallel, layer.out, [&](size_t begin, size_t end) {
      Gemm(true, false, int(end - begin), layer.in, batch, T(1), d + begin, layer.out, a_in,
           layer.in, T(0), grad + layer.weights + begin * layer.in, layer.in);
    });
    T* db = grad + layer.bias;
    std::fill(db, db + layer.out, T(0));
    for (int r = 0; r < batch; ++r) {
      const T* dr = d + size_t(r) * layer.out;
      for (int c = 0; c < layer.out; ++c) db[c] += dr[c];
    }
    if (l == 0) break;  // no gradient for the input
    // delta_prev = (delta W) * activation'(z_prev), split by batch rows.
    T* dp = ws.delta_prev.data();
    Rows(parallel, batch, [&](size_t begin, size_t end) {
      Gemm(false, false, int(end - begin), layer.in, layer.out, T(1), d + begin * layer.out,
           layer.out, params + layer.weights, layer.in, T(0), dp + begin * layer.in, layer.in);
    });
    const size_t n = size_t(batch) * layer.in;
    const T* z_prev = ws.pre[l - 1].data();
    const T* a_prev = ws.post[l - 1].data();
    if (shape.activation() == model::Activation::kRelu) {
      for (size_t i = 0; i < n; ++i) dp[i] = z_prev[i] > T(0) ? dp[i] : T(0);
    } else {
      for (size_t i = 0; i < n; ++i) dp[i] *= a_prev[i] * (T(1) - a_prev[i]);
    }
    std::swap(ws.delta, ws.delta_prev);
  }
  return stats;
}

template struct MlpWorkspace<float>;
template struct MlpWorkspace<double>;
template model::BatchStats Forward<float>(const model::ModelShape&, const float*, const float*, const int32_t*,
                                   int, MlpWorkspace<float>&, const RowParallelFor*);
template model::BatchStats Forward<double>(const model::ModelShape&, const double*, const double*,
                                    const int32_t*, int, MlpWorkspace<double>&,
                                    const RowParallelFor*);
template model::BatchStats ForwardBackward<float>(const model::ModelShape&, const float*, const float*,
                                           const int32_t*, int, MlpWorkspace<float>&, float*,
                                           const RowParallelFor*);
template model::BatchStats ForwardBackward<double>(const model::ModelShape&, const double*, const double*,
                                            const int32_t*, int, MlpWorkspace<double>&, double*,
                                            const RowParallelFor*);

}  // namespace reckon::cpu
