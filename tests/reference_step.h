// A float64 reference of one dense training step, to measure a float32
// backend's step against (issue 16): the MLP's forward and backward in
// double (cpu::ForwardBackward<double>), the optimizer rules of
// model/optimizer.cc in double, and error feedback that emits the whole
// residual. Two float32 backends sum their GEMMs in different orders, so
// their emissions differ element by element by more than any bound relative
// to the largest element; what both must meet is a small error against the
// exact step, norm-wise: ||emitted - reference|| / ||reference||.
#ifndef RECKON_TESTS_REFERENCE_STEP_H_
#define RECKON_TESTS_REFERENCE_STEP_H_

#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "cpu/mlp_math.h"
#include "model/backend.h"

namespace reckon::testing {

class ReferenceStep {
 public:
  // The replica `quanta` on the grid of config.fraction_bits; plain, momentum
  // or AdaGrad (local) as config.optimizer says, with its weight decay.
  ReferenceStep(const model::BackendConfig& config, std::span<const int64_t> quanta)
      : config_(config), scale_(std::ldexp(1.0, config.fraction_bits)) {
    weights_.resize(quanta.size());
    for (size_t i = 0; i < quanta.size(); ++i) weights_[i] = double(quanta[i]) / scale_;
    state_.assign(quanta.size(), 0.0);
    grad_.resize(quanta.size());
  }

  // The step's emission, in quanta: the optimizer's delta for this batch
  // (nothing is left in the residual: the reference emits it all).
  std::vector<double> Step(const float* images, const int32_t* labels, int batch, float lr) {
    const model::ModelShape& shape = config_.shape;
    std::vector<double> x(images, images + size_t(batch) * shape.inputs());
    cpu::MlpWorkspace<double> ws;
    ws.Resize(shape, batch);
    cpu::ForwardBackward(shape, weights_.data(), x.data(), labels, batch, ws, grad_.data());
    const model::OptimizerConfig& o = config_.optimizer;
    std::vector<double> emitted(weights_.size());
    for (size_t i = 0; i < weights_.size(); ++i) {
      const double g = grad_[i] + o.weight_decay * weights_[i];
      double delta = 0;
      switch (o.kind) {
        case model::OptimizerKind::kSgd:
          delta = -double(lr) * g;
          break;
        case model::OptimizerKind::kMomentum:
          state_[i] = o.momentum * state_[i] - double(lr) * g;
          delta = state_[i];
          break;
        case model::OptimizerKind::kAdagrad:
          state_[i] += g * g;
          delta = -double(lr) * g / (std::sqrt(state_[i]) + o.adagrad_eps);
          break;
      }
      emitted[i] = delta * scale_;
    }
    return emitted;
  }

  // Applies an emission (every replica applies the same one).
  void Apply(std::span<const int64_t> quanta) {
    for (size_t i = 0; i < quanta.size(); ++i) weights_[i] += double(quanta[i]) / scale_;
  }

 private:
  model::BackendConfig config_;
  double scale_;
  std::vector<double> weights_, state_, grad_;
};

// The batch both dense-step tests use: `batch` images of `features`
// uniform pixels in [0, 1) from a fixed seed, labels 0, 1, ..., 9, 0, ...
inline void SyntheticBatch(int batch, int features, std::vector<float>* images,
                           std::vector<int32_t>* labels) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> pixel(0.0f, 1.0f);
  images->resize(size_t(batch) * features);
  labels->resize(batch);
  for (float& x : *images) x = pixel(rng);
  for (size_t i = 0; i < labels->size(); ++i) (*labels)[i] = int32_t(i % 10);
}

// ||a - reference|| / ||reference|| (Euclidean norms).
inline double RelativeError(std::span<const int64_t> a, const std::vector<double>& reference) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double d = double(a[i]) - reference[i];
    diff += d * d;
    norm += reference[i] * reference[i];
  }
  return std::sqrt(diff / norm);
}

}  // namespace reckon::testing

#endif  // RECKON_TESTS_REFERENCE_STEP_H_
