// Gradient check of every layer type (affine, ReLU, sigmoid, softmax
// cross-entropy) against central finite differences, in double precision.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "codec/fixed_point.h"
#include "codec/quantizer.h"
#include "cpu/cpu_backend.h"
#include "cpu/mlp_math.h"
#include "model/model.h"
#include "tests/reference_step.h"
#include "tests/step_in_halves.h"
#include "tests/test_util.h"

namespace reckon::cpu {
namespace {

void CheckGradient(const std::string& layers, const std::string& activation) {
  const model::ModelShape shape = *model::ModelShape::Parse(layers, activation);
  const int batch = 7;
  std::mt19937_64 rng(3);
  std::normal_distribution<double> normal(0.0, 0.5);
  std::vector<double> params(shape.param_count()), x(size_t(batch) * shape.inputs());
  for (double& p : params) p = normal(rng);
  for (double& v : x) v = normal(rng);
  std::vector<int32_t> labels(batch);
  for (int32_t& l : labels) l = static_cast<int32_t>(rng() % shape.classes());

  MlpWorkspace<double> ws;
  ws.Resize(shape, batch);
  std::vector<double> grad(shape.param_count());
  ForwardBackward(shape, params.data(), x.data(), labels.data(), batch, ws, grad.data());

  auto mean_loss = [&] {
    MlpWorkspace<double> w;
    w.Resize(shape, batch);
    return Forward(shape, params.data(), x.data(), labels.data(), batch, w).loss_sum / batch;
  };
  const double h = 1e-6;
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    const double saved = params[i];
    params[i] = saved + h;
    const double up = mean_loss();
    params[i] = saved - h;
    const double down = mean_loss();
    params[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err =
        std::fabs(numeric - grad[i]) / std::max(1e-4, std::fabs(numeric) + std::fabs(grad[i]));
    worst = std::max(worst, err);
    ASSERT_LT(err, 1e-5) << layers << "/" << activation << " parameter " << i << ": analytic "
                         << grad[i] << " numeric " << numeric;
  }
  ::testing::Test::RecordProperty("worst_relative_error", std::to_string(worst));
}

TEST(MlpGradient, SoftmaxAndAffineOnly) { CheckGradient("6,4", "relu"); }
TEST(MlpGradient, ReluHiddenLayers) { CheckGradient("6,5,4,3", "relu"); }
TEST(MlpGradient, SigmoidHiddenLayers) { CheckGradient("6,5,4,3", "sigmoid"); }

TEST(MlpForward, FloatAndDoubleAgree) {
  const model::ModelShape shape = *model::ModelShape::Parse("20,16,10", "relu");
  std::mt19937_64 rng(5);
  std::normal_distribution<double> normal(0.0, 0.3);
  std::vector<double> pd(shape.param_count()), xd(4 * 20);
  for (double& p : pd) p = normal(rng);
  for (double& v : xd) v = normal(rng);
  std::vector<float> pf(pd.begin(), pd.end()), xf(xd.begin(), xd.end());
  const std::vector<int32_t> labels = {1, 2, 3, 4};
  MlpWorkspace<double> wd;
  MlpWorkspace<float> wf;
  wd.Resize(shape, 4);
  wf.Resize(shape, 4);
  std::vector<double> gd(shape.param_count());
  std::vector<float> gf(shape.param_count());
  const model::BatchStats sd =
      ForwardBackward(shape, pd.data(), xd.data(), labels.data(), 4, wd, gd.data());
  const model::BatchStats sf =
      ForwardBackward(shape, pf.data(), xf.data(), labels.data(), 4, wf, gf.data());
  EXPECT_NEAR(sd.loss_sum, sf.loss_sum, 1e-4);
  for (size_t i = 0; i < gd.size(); ++i) EXPECT_NEAR(gd[i], gf[i], 1e-4) << i;
}

}  // namespace
}  // namespace reckon::cpu
