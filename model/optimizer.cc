#include "model/optimizer.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"

namespace reckon::model {

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name) {
  if (name == "sgd") return OptimizerKind::kSgd;
  if (name == "momentum") return OptimizerKind::kMomentum;
  if (name == "adagrad") return OptimizerKind::kAdagrad;
  return absl::InvalidArgumentError(
      absl::StrCat("--optimizer '", name, "' is not sgd, momentum or adagrad"));
}

absl::StatusOr<Schedule> ParseSchedule(const std::string& name) {
  if (name == "constant") return Schedule::kConstant;
  if (name == "halve") return Schedule::kHalve;
  return absl::InvalidArgumentError(
      absl::StrCat("--lr-schedule '", name, "' is not constant or halve"));
}

absl::StatusOr<AdagradPlacement> ParseAdagradPlacement(const std::string& name) {
  if (name == "local") return AdagradPlacement::kLocal;
  if (name == "aggregate") return AdagradPlacement::kAggregate;
  return absl::InvalidArgumentError(
      absl::StrCat("--adagrad-placement '", name, "' is not local or aggregate"));
}

std::string OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kMomentum: return "momentum";
    case OptimizerKind::kAdagrad: return "adagrad";
  }
  return "?";
}

std::string ScheduleName(Schedule schedule) {
  return schedule == Schedule::kHalve ? "halve" : "constant";
}

double LearningRate(const OptimizerConfig& config, int epoch, int64_t step) {
  double lr = config.learning_rate;
  if (config.schedule == Schedule::kHalve && epoch > config.halve_after) {
    lr = std::ldexp(lr, -(epoch - config.halve_after));
  }
  if (config.warmup_steps > 0 && step < config.warmup_steps) {
    lr *= static_cast<double>(step + 1) / static_cast<double>(config.warmup_steps);
  }
  return lr;
}

namespace {

// Rule 5's linear model (optimizer.h): one direction of curvature lambda,
// x(t+1) = x(t) + m (x(t) - x(t-1)) - a x(t - s), a = lr' lambda. Returns
// the largest a at which it is stable. At the boundary a root of z^(s+1) -
// (1 + m) z^s + m z^(s-1) + a is on the unit circle, z = e^(i theta), where
// a = -z^(s-1) (z - 1) (z - m) is real and positive: (s - 1/2) theta +
// arg(e^(i theta) - m) = pi/2, an equation increasing in theta on (0, pi)
// for m in [0, 1), so one root, found by bisection; then a = |z - 1| |z - m|.
// (m = 0: a = 2 sin(pi / (2 (2s + 1))), delayed gradient descent's bound.)
// For a whole s it is the root-finding answer; between, the same formula.
double DelayedHeavyBallLimit(double m, double s) {
  s = std::max(s, 0.5);
  double lo = 0, hi = std::numbers::pi;
  for (int i = 0; i < 60; ++i) {
    const double theta = (lo + hi) / 2;
    const double phase = (s - 0.5) * theta + std::atan2(std::sin(theta), std::cos(theta) - m);
    (phase < std::numbers::pi / 2 ? lo : hi) = theta;
  }
  const double theta = (lo + hi) / 2;
  return 2 * std::sin(theta / 2) * std::sqrt(1 - 2 * m * std::cos(theta) + m * m);
}

// Rules 2-4: the per-update momentum that spends what staleness leaves of
// one worker's mean delay, and a gradient's pull in all, in units of lr.
struct DelayBudget {
  double per_update;
  double pull;
};
DelayBudget SpendDelayBudget(double momentum, double staleness) {
  const double budget = momentum / (1 - momentum);
  const double delay_left = std::max(0.0, budget - staleness);
  const double past_budget = staleness > budget ? (1 + budget) / (1 + staleness) : 1.0;
  return {delay_left / (1 + delay_left), past_budget / (1 - momentum)};
}

// The sharpness (times lr) up to which a cluster of `budget`'s rule at
// `staleness` is stable: a = lr' lambda with lr' = lr pull (1 - m).
double StableSharpnessTimesRate(const DelayBudget& budget, double staleness) {
  return DelayedHeavyBallLimit(budget.per_update, staleness) /
         (budget.pull * (1 - budget.per_update));
}

// Four workers on a fast link: the staleness of the recipe measured at the
// default flags (docs/benchmarks.md "Momentum matched to the cluster").
constexpr double kReferenceStaleness = 1.5 * 3;

}  // namespace

MomentumRule MatchMomentumToCluster(double learning_rate, double momentum, int members,
                                    double round_trip_steps) {
  if (members <= 1 || !(momentum > 0 && momentum < 1)) return {learning_rate, momentum};
  const double staleness = (1.5 + std::max(0.0, round_trip_steps)) * (members - 1);
  DelayBudget rule = SpendDelayBudget(momentum, staleness);
  const double reference = StableSharpnessTimesRate(SpendDelayBudget(momentum, kReferenceStaleness),
                                                    kReferenceStaleness);
  const double stable = StableSharpnessTimesRate(rule, staleness);
  if (stable < reference) rule.pull *= stable / reference;
  const double per_own_step = std::pow(rule.per_update, members);
  return {learning_rate * (1 - per_own_step) * rule.pull, per_own_step};
}

namespace {

// The rules, with the gradient given as a function of i so that weight decay
// costs nothing when it is off.
template <typename Grad>
void Accumulate(const OptimizerConfig& config, float lr, size_t n, Grad grad,
                std::span<float> state, std::span<float> residual,
                std::span<const float> peer_step) {
  float* r = residual.data();
  switch (config.kind) {
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) r[i] += -lr * grad(i);
      break;
    case OptimizerKind::kMomentum: {
      const float mu = static_cast<float>(config.momentum);
      float* v = state.data();
      for (size_t i = 0; i < n; ++i) {
        v[i] = mu * v[i] - lr * grad(i);
        r[i] += v[i];
      }
      break;
    }
    case OptimizerKind::kAdagrad: {
      const float eps = static_cast<float>(config.adagrad_eps);
      float* h = state.data();
      if (peer_step.empty()) {
        for (size_t i = 0; i < n; ++i) {
          const float g = grad(i);
          h[i] += g * g;
          r[i] += -lr * g / (std::sqrt(h[i]) + eps);
        }
      } else {
        const float* p = peer_step.data();
        for (size_t i = 0; i < n; ++i) {
          const float g = grad(i);
          const float aggregate = g - p[i] * (std::sqrt(h[i]) + eps) / lr;
          h[i] += aggregate * aggregate;
          r[i] += -lr * g / (std::sqrt(h[i]) + eps);
        }
      }
      break;
    }
  }
}

}  // namespace

uint32_t AccumulateDelta(const OptimizerConfig& config, float lr, std::span<const float> grad,
                         std::span<const float> weights, std::span<float> state,
                         std::span<float> residual, std::span<const float> peer_step,
                         ResidualBound bound) {
  // Block by block, each block's largest |residual| taken right after it is
  // written, from the L1 cache (in the rules' loops the max kept them from
  // vectorizing on the build's baseline, SSE2).
  constexpr size_t kBlock = 4096;
  int32_t largest = 0;
  for (size_t begin = 0; begin < grad.size(); begin += kBlock) {
    const size_t len = std::min(kBlock, grad.size() - begin);
    const auto part = [&](auto span) { return span.empty() ? span : span.subspan(begin, len); };
    const float* g = grad.data() + begin;
    std::span<float> r = residual.subspan(begin, len);
    if (config.weight_decay == 0) {
      Accumulate(
          config, lr, len, [g](size_t i) { return g[i]; }, part(state), r, part(peer_step));
    } else {
      const float wd = static_cast<float>(config.weight_decay);
      const float* w = weights.data() + begin;
      Accumulate(
          config, lr, len, [g, w, wd](size_t i) { return g[i] + wd * w[i]; }, part(state), r,
          part(peer_step));
    }
    if (bound == ResidualBound::kNotTaken) continue;
    for (const float x : r) largest = std::max(largest, codec::ResidualMagnitudeBits(x));
  }
  return bound == ResidualBound::kTaken ? static_cast<uint32_t>(largest)
                                        : codec::kResidualBoundUnknown;
}

}  // namespace reckon::model
