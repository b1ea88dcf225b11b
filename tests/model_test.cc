// The model (its shape, wire order and initial replicas) and the
// optimizers' rules (model/model.h, model/optimizer.h).
#include "model/model.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"
#include "codec/fixed_point.h"
#include "cpu/cpu_backend.h"
#include "model/forwarding_backend.h"
#include "model/optimizer.h"
#include "tests/test_process.h"
#include "worker/checkpoint.h"
#include "worker/dataset.h"
#include "worker/pretrain.h"
#include "worker/trainer.h"

namespace reckon::worker {
namespace {

TEST(Model, LayoutFollowsWireOrder) {
  const model::ModelShape s = *model::ModelShape::Parse("784,512,512,10", "relu");
  EXPECT_EQ(s.param_count(), 784u * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10);
  ASSERT_EQ(s.layers().size(), 3u);
  EXPECT_EQ(s.layers()[0].weights, 0u);
  EXPECT_EQ(s.layers()[0].bias, 784u * 512);
  EXPECT_EQ(s.layers()[1].weights, 784u * 512 + 512);
  EXPECT_EQ(s.ToString(), "784,512,512,10/relu");
  EXPECT_FALSE(model::ModelShape::Parse("784", "relu").ok());
  EXPECT_FALSE(model::ModelShape::Parse("784,x,10", "relu").ok());
  EXPECT_FALSE(model::ModelShape::Parse("784,10", "tanh").ok());
  EXPECT_FALSE(model::ModelShape::Parse("65536,65536", "relu").ok());  // 2^32 params
}

TEST(Model, InitialReplicaHasTheKnownHash) {
  // Pinned: any change to the portable initialization (SplitMix64 streams,
  // rejection sampling, the He limit, the layout) changes this hash, and
  // replicas built by different versions would no longer agree.
  const model::ModelShape s = *model::ModelShape::Parse("784,512,512,10", "relu");
  codec::FixedPointReplica r = *codec::FixedPointReplica::Create(s.param_count(), 32);
  ASSERT_TRUE(model::InitializeModel(s, 1, &r).ok());
  EXPECT_EQ(r.WeightHash(), KNOWN_INITIAL_HASH);
  // Weights within the He limit, biases zero.
  const double limit = std::sqrt(6.0 / 784);
  for (size_t i = 0; i < 784 * 512; ++i) ASSERT_LE(std::fabs(r.weights()[i]), limit);
  for (size_t i = 784 * 512; i < 784 * 512 + 512; ++i) ASSERT_EQ(r.quanta()[i], 0);
}

TEST(Model, SigmoidReplicaHasItsKnownHashAndGlorotTimesFourInHiddenLayers) {
  // Pinned like the ReLU one: the sigmoid limits are part of the contract.
  const model::ModelShape s = *model::ModelShape::Parse("784,256,256,10", "sigmoid");
  codec::FixedPointReplica r = *codec::FixedPointReplica::Create(s.param_count(), 32);
  ASSERT_TRUE(model::InitializeModel(s, 1, &r).ok());
  EXPECT_EQ(r.WeightHash(), KNOWN_SIGMOID_INITIAL_HASH);
  EXPECT_DOUBLE_EQ(model::InitLimit(s, 0), 4 * std::sqrt(6.0 / (784 + 256)));
  EXPECT_DOUBLE_EQ(model::InitLimit(s, 1), 4 * std::sqrt(6.0 / (256 + 256)));
  EXPECT_DOUBLE_EQ(model::InitLimit(s, 2), std::sqrt(6.0 / (256 + 10)));  // the output
  for (size_t l = 0; l < s.layers().size(); ++l) {
    const model::LayerLayout& layer = s.layers()[l];
    const double limit = model::InitLimit(s, l);
    double largest = 0;
    for (size_t i = 0; i < static_cast<size_t>(layer.in) * layer.out; ++i) {
      largest = std::max(largest, double(std::fabs(r.weights()[layer.weights + i])));
    }
    EXPECT_LE(largest, limit) << l;
    EXPECT_GT(largest, 0.95 * limit) << l << ": the draws fill the range";
  }
}

TEST(Optimizer, RulesAndSchedules) {
  model::OptimizerConfig c;
  c.learning_rate = 0.1;
  c.schedule = model::Schedule::kHalve;
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 0, 0), 0.1);
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 3, 0), 0.1 / 8);
  c.halve_after = 2;
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 2, 0), 0.1);
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 4, 0), 0.1 / 4);
  c.halve_after = 0;
  c.schedule = model::Schedule::kConstant;
  c.warmup_steps = 10;
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 0, 0), 0.01);
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 0, 4), 0.05);
  EXPECT_DOUBLE_EQ(model::LearningRate(c, 2, 100), 0.1);

  const std::vector<float> g = {1.0f, -2.0f};
  std::vector<float> state = {0.0f, 0.0f}, r = {0.0f, 0.0f};
  c.kind = model::OptimizerKind::kSgd;
  model::AccumulateDelta(c, 0.5f, g, {}, {}, r);
  EXPECT_EQ(r, (std::vector<float>{-0.5f, 1.0f}));
  c.kind = model::OptimizerKind::kMomentum;
  c.momentum = 0.5;
  r = {0, 0};
  model::AccumulateDelta(c, 1.0f, g, {}, state, r);  // v = -g
  model::AccumulateDelta(c, 1.0f, g, {}, state, r);  // v = -0.5 g - g = -1.5 g; r = -2.5 g
  EXPECT_EQ(r, (std::vector<float>{-2.5f, 5.0f}));
  c.kind = model::OptimizerKind::kAdagrad;
  c.adagrad_eps = 0;
  state = {0, 0};
  r = {0, 0};
  model::AccumulateDelta(c, 1.0f, g, {}, state, r);  // -g / |g|
  EXPECT_EQ(r, (std::vector<float>{-1.0f, 1.0f}));
  EXPECT_EQ(state, (std::vector<float>{1.0f, 4.0f}));
  // Weight decay adds wd * w to the gradient.
  c.kind = model::OptimizerKind::kSgd;
  c.weight_decay = 0.5;
  r = {0, 0};
  const std::vector<float> w = {2.0f, 2.0f};
  model::AccumulateDelta(c, 1.0f, g, w, {}, r);  // g + 1
  EXPECT_EQ(r, (std::vector<float>{-2.0f, 1.0f}));
}

// AdaGrad on the aggregate: the accumulator takes a peer's step back into
// gradient units with this worker's own h; the step itself is still the own
// gradient's. With no peer step the rule is local AdaGrad.
TEST(Optimizer, AggregateAdagradFeedsThePeersStepToTheAccumulator) {
  model::OptimizerConfig c;
  c.kind = model::OptimizerKind::kAdagrad;
  c.adagrad_eps = 0;
  const std::vector<float> g = {1.0f, -2.0f};
  std::vector<float> h = {1.0f, 4.0f}, r = {0.0f, 0.0f};
  // Element 0: a peer moved the weight -0.5 (its gradient, in our units:
  // 0.5 x sqrt(1) / lr = 1): a = 1 + 1 = 2. Element 1: no peer step.
  const std::vector<float> peer_step = {-0.5f, 0.0f};
  model::AccumulateDelta(c, 0.5f, g, {}, h, r, peer_step);
  EXPECT_EQ(h, (std::vector<float>{1.0f + 4.0f, 4.0f + 4.0f}));
  EXPECT_FLOAT_EQ(r[0], -0.5f * 1.0f / std::sqrt(5.0f));
  EXPECT_FLOAT_EQ(r[1], -0.5f * -2.0f / std::sqrt(8.0f));
  EXPECT_EQ(model::ParseAdagradPlacement("aggregate").value(), model::AdagradPlacement::kAggregate);
  EXPECT_EQ(model::ParseAdagradPlacement("global").status().message(),
            "--adagrad-placement 'global' is not local or aggregate");
}

// Every rule returns the largest |residual| it wrote, as float bits, taken
// as it wrote (the encoder's check then needs no pass of its own): the
// residual's largest magnitude, a value it already held included, with
// weight decay or not, and a NaN or Inf above every finite value.
TEST(Optimizer, EveryRuleReturnsTheLargestResidualItWrote) {
  const auto magnitude_bits = [](const std::vector<float>& r) {
    uint32_t largest = 0;
    for (const float x : r) largest = std::max(largest, std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu);
    return largest;
  };
  std::vector<float> g(1000), w(1000);
  for (size_t i = 0; i < g.size(); ++i) {
    g[i] = std::sin(float(i)) * (i == 617 ? 40.0f : 1.0f);
    w[i] = std::cos(float(i));
  }
  for (const auto kind : {model::OptimizerKind::kSgd, model::OptimizerKind::kMomentum,
                          model::OptimizerKind::kAdagrad}) {
    for (const bool peers : {false, true}) {
      for (const double decay : {0.0, 1e-2}) {
        if (peers && kind != model::OptimizerKind::kAdagrad) continue;
        SCOPED_TRACE(::testing::Message()
                     << model::OptimizerName(kind) << " peers " << peers << " decay " << decay);
        model::OptimizerConfig c;
        c.kind = kind;
        c.weight_decay = decay;
        std::vector<float> state(g.size(), 0.5f), r(g.size(), 0.0f);
        r[3] = -900.0f;  // held from before, and still the largest
        const std::vector<float> peer_step(peers ? g.size() : 0, 1e-3f);
        uint32_t got = model::AccumulateDelta(c, 0.1f, g, w, state, r, peer_step);
        EXPECT_EQ(got, magnitude_bits(r));
        r[3] = 0.0f;
        got = model::AccumulateDelta(c, 0.1f, g, w, state, r, peer_step);
        EXPECT_EQ(got, magnitude_bits(r));
        r[10] = INFINITY;
        got = model::AccumulateDelta(c, 0.1f, g, w, state, r, peer_step);
        EXPECT_EQ(got, std::bit_cast<uint32_t>(INFINITY));
        r[11] = std::nanf("");
        got = model::AccumulateDelta(c, 0.1f, g, w, state, r, peer_step);
        EXPECT_GT(got, std::bit_cast<uint32_t>(INFINITY));
        // Not asked for (the threshold quantizer checks each element
        // itself): the same residual and state, the bound unknown.
        std::vector<float> state_taken = state, r_taken = r;
        model::AccumulateDelta(c, 0.1f, g, w, state_taken, r_taken, peer_step);
        got = model::AccumulateDelta(c, 0.1f, g, w, state, r, peer_step,
                                     model::ResidualBound::kNotTaken);
        EXPECT_EQ(got, codec::kResidualBoundUnknown);
        EXPECT_EQ(0, std::memcmp(r.data(), r_taken.data(), r.size() * sizeof(float)));
        EXPECT_EQ(0, std::memcmp(state.data(), state_taken.data(), state.size() * sizeof(float)));
      }
    }
  }
}

// N workers applying each other's updates: a per-update decay m whose mean
// delay m / (1 - m) is one worker's mu / (1 - mu) less the staleness
// (1.5 + the round trip in steps) (N - 1), raised to the N-th power per
// own step, and a rate scaled so that a gradient moves the weights
// lr / (1 - mu) in all, or less where the cluster would be less stable than
// four workers on a fast link.
TEST(Optimizer, MomentumMatchedToTheCluster) {
  model::MomentumRule one = model::MatchMomentumToCluster(0.02, 0.9, 1);
  EXPECT_EQ(one.learning_rate, 0.02);
  EXPECT_EQ(one.momentum, 0.9);
  // mu 0.9: a mean delay of 9 updates. Two workers: 9 - 1.5 = 7.5, so
  // m = 7.5 / 8.5 = 15/17. Four: 9 - 4.5 = 4.5, m = 9/11.
  const model::MomentumRule two = model::MatchMomentumToCluster(0.02, 0.9, 2);
  EXPECT_NEAR(two.momentum, 225.0 / 289.0, 1e-12);
  const model::MomentumRule four = model::MatchMomentumToCluster(0.02, 0.9, 4);
  EXPECT_NEAR(four.momentum, 6561.0 / 14641.0, 1e-12);
  EXPECT_NEAR(four.learning_rate, 0.02 * (1 - 6561.0 / 14641.0) / 0.1, 1e-12);
  // Past the four workers' staleness the rate shrinks until the cluster is
  // as stable as they are (rule 5); where the budget is spent, plain SGD at
  // the rate delayed gradient descent is stable at up to their sharpness
  // (1.2415 at lr 0.02: Optimizer.ClusterIsAsStableAsFourWorkersOnAFastLink):
  // lr' x 1.2415 = 2 sin(pi / (2 (2s + 1))). Eight workers, s = 10.5.
  const double reference = 0.02483 / 0.02;
  auto delayed_sgd_rate = [&](double s) {
    return 2 * std::sin(std::numbers::pi / (2 * (2 * s + 1))) / reference;
  };
  const model::MomentumRule eight = model::MatchMomentumToCluster(0.02, 0.9, 8);
  EXPECT_EQ(eight.momentum, 0.0);
  EXPECT_NEAR(eight.learning_rate, delayed_sgd_rate(10.5), 1e-3 * eight.learning_rate);
  for (int n : {2, 3, 4, 7, 8, 16, 100}) {
    const model::MomentumRule m = model::MatchMomentumToCluster(0.02, 0.9, n);
    const double staleness = 1.5 * (n - 1);
    const double pull = m.learning_rate / (1 - m.momentum);
    if (staleness <= 4.5) {
      EXPECT_NEAR(pull, 0.02 / (1 - 0.9), 1e-12) << n;
    } else {
      EXPECT_NEAR(m.momentum, 0.0, 1e-12) << n;  // s = 9 at seven: 9 - 9 in floating point
      EXPECT_NEAR(m.learning_rate, delayed_sgd_rate(staleness), 1e-3 * m.learning_rate) << n;
    }
    EXPECT_LE(m.momentum, std::pow(0.9, n)) << n;  // never more memory than rule 1 alone
  }
  // A link's round trip adds to the staleness, in steps: four workers 1.5
  // steps apart (s = 3 x 3 = 9, the whole budget) and 3 apart (s = 13.5)
  // run plain SGD. A negative round trip is none.
  const model::MomentumRule late = model::MatchMomentumToCluster(0.02, 0.9, 4, 1.5);
  EXPECT_NEAR(late.momentum, 0.0, 1e-12);  // 9 - 9, in floating point
  EXPECT_NEAR(late.learning_rate, delayed_sgd_rate(9), 1e-3 * late.learning_rate);
  const model::MomentumRule later = model::MatchMomentumToCluster(0.02, 0.9, 4, 3);
  EXPECT_EQ(later.momentum, 0.0);
  EXPECT_NEAR(later.learning_rate, delayed_sgd_rate(13.5), 1e-3 * later.learning_rate);
  const model::MomentumRule a_little = model::MatchMomentumToCluster(0.02, 0.9, 4, 0.5);
  EXPECT_NEAR(a_little.momentum, std::pow(3.0 / 4.0, 4), 1e-12);  // 9 - 6 = 3: m = 3/4
  EXPECT_EQ(model::MatchMomentumToCluster(0.02, 0.9, 4, -2).momentum, four.momentum);
  // A gradient's pull, summed over a worker's own steps: lr / (1 - mu).
  const model::MomentumRule m =
      model::MatchMomentumToCluster(1.0, 0.95, 3);  // 19 - 3 = 16: m = 16/17
  EXPECT_NEAR(m.momentum, std::pow(16.0 / 17.0, 3), 1e-12);
  double pull_own_step = m.learning_rate, total = 0;
  for (int own_step = 0; own_step < 2000; ++own_step, pull_own_step *= m.momentum) {
    total += pull_own_step;
  }
  EXPECT_NEAR(total, 1.0 / (1 - 0.95), 1e-9);
  // No momentum, or none to match: unchanged.
  EXPECT_EQ(model::MatchMomentumToCluster(0.1, 0.0, 4).learning_rate, 0.1);
  EXPECT_EQ(model::MatchMomentumToCluster(0.1, 0.0, 4).momentum, 0.0);
  EXPECT_EQ(model::MatchMomentumToCluster(0.1, 0.9, 0).momentum, 0.9);
}

// The linear model behind rule 5 (model/optimizer.h), simulated: one
// direction of curvature `sharpness`, each update the cluster's per-update
// momentum m and rate lr' = pull (1 - m) applied to the gradient of weights
// `delay` updates old, x(t+1) = x(t) + m (x(t) - x(t-1)) - lr' sharpness
// x(t - delay). Returns the largest |x| of the last 2,000 of 20,000 updates
// over that of the first 2,000: far below 1 where it settles, far above
// where it oscillates apart.
double DelayedHeavyBallGrowth(const model::MomentumRule& rule, int members, int delay,
                              double sharpness) {
  const double m = std::pow(rule.momentum, 1.0 / members);
  const double rate = rule.learning_rate / (1 - rule.momentum) * (1 - m);
  std::vector<double> x(delay + 1, 1.0);  // x(t - delay) .. x(t); delay >= 1
  double first = 0, last = 0;
  for (int t = 0; t < 20'000; ++t) {
    const double next = x.back() + m * (x.back() - x[x.size() - 2]) - rate * sharpness * x[0];
    x.erase(x.begin());
    x.push_back(next);
    if (t < 2'000) first = std::max(first, std::fabs(next));
    if (t >= 18'000) last = std::max(last, std::fabs(next));
  }
  return last / first;
}

// Staleness costs a cluster its stability before its speed: with its
// momentum budget spent, the rate shrinks until the linear model of the
// cluster is stable up to the sharpness that four workers on a fast link
// (s = 4.5, the recipe measured at 89.5%) are stable up to, 1.2415 / lr at
// mu 0.9: the rule's configurations settle at 0.95 of it and part at 1.05
// where the rule shrank the rate, at staleness (1.5 + R)(N - 1) a whole
// number of updates. The rule before it (the budget alone, which kept a
// gradient's pull times its delay) parted at 0.95 from a round trip of half
// a step on: four workers behind 10 ms links diverged in most runs.
TEST(Optimizer, ClusterIsAsStableAsFourWorkersOnAFastLink) {
  const double lr = 0.02;
  const double reference = 0.02483 / lr;  // a sharpness: 1.2415 at lr 0.02
  struct Case {
    int members;
    double round_trip;
    bool shrunk;  // the rule shrinks the rate here
  };
  for (const Case& c : {Case{4, 0.5, true}, Case{4, 1.5, true}, Case{4, 2.5, true},
                        Case{4, 5.5, true}, Case{3, 1, true}, Case{8, 0.5, true},
                        Case{16, 0.5, true}, Case{2, 0.5, false}, Case{3, 0.5, false}}) {
    const double staleness = (1.5 + c.round_trip) * (c.members - 1);
    const int delay = static_cast<int>(staleness);
    ASSERT_EQ(delay, staleness);
    const model::MomentumRule rule =
        model::MatchMomentumToCluster(lr, 0.9, c.members, c.round_trip);
    EXPECT_LT(DelayedHeavyBallGrowth(rule, c.members, delay, 0.95 * reference), 1e-3)
        << c.members << " workers, round trip " << c.round_trip;
    if (c.shrunk) {
      EXPECT_GT(DelayedHeavyBallGrowth(rule, c.members, delay, 1.05 * reference), 1e3)
          << c.members << " workers, round trip " << c.round_trip << ": shrunk more than needed";
    }
  }
}

}  // namespace
}  // namespace reckon::worker
