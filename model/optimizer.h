// Optimizers and learning-rate schedules. The schedule is host arithmetic;
// the per-element rule has a CPU twin here (AccumulateDelta) that the CUDA
// kernel must match.
//
// Threads: pure functions and values, any thread. Errors: an unknown
// optimizer, schedule or placement name is kInvalidArgument naming it
// (the Parse* functions).
#ifndef RECKON_MODEL_OPTIMIZER_H_
#define RECKON_MODEL_OPTIMIZER_H_

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace reckon::model {

enum class OptimizerKind { kSgd, kMomentum, kAdagrad };
enum class Schedule { kConstant, kHalve };
// Where AdaGrad's accumulator gets its squared gradients (Seide 2014
// section 4 and Table 3; docs/training.md "AdaGrad placement"):
//   kLocal:     this worker's own gradient, before quantization.
//   kAggregate: the cluster's aggregate as this worker sees it: its own
//               gradient plus what the peers' quantized messages moved the
//               replica since its last step, in gradient units. The
//               normalization still runs at the origin, before quantization:
//               at the receivers its state would depend on the order that
//               messages arrive in, and the replicas would fork.
enum class AdagradPlacement { kLocal, kAggregate };

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kMomentum;
  double learning_rate = 0.05;
  double momentum = 0.9;      // kMomentum only
  double adagrad_eps = 1e-8;  // kAdagrad only
  double weight_decay = 0;    // L2: g += weight_decay * w before the rule
  AdagradPlacement adagrad_placement = AdagradPlacement::kLocal;  // kAdagrad only
  Schedule schedule = Schedule::kConstant;
  int halve_after = 0;  // kHalve: the first this many epochs keep the full rate
  // Linear warm-up from lr / warmup_steps to lr over the first steps.
  int64_t warmup_steps = 0;
};

absl::StatusOr<OptimizerKind> ParseOptimizer(const std::string& name);  // sgd|momentum|adagrad
absl::StatusOr<Schedule> ParseSchedule(const std::string& name);        // constant|halve
absl::StatusOr<AdagradPlacement> ParseAdagradPlacement(const std::string& name);  // local|aggregate
std::string OptimizerName(OptimizerKind kind);
std::string ScheduleName(Schedule schedule);

// The learning rate for a step: the schedule (halve: lr / 2^(epoch -
// halve_after) once epoch > halve_after, Strom's recipe when halve_after is
// 0), times the warm-up ramp. `epoch` and `step` count from 0.
double LearningRate(const OptimizerConfig& config, int epoch, int64_t step);

// The momentum rule of one of `members` workers that train one model
// together, each applying every other's updates (asynchronous data
// parallelism with summed updates), chosen so that the cluster moves the
// weights as one worker with `momentum` would (docs/training.md):
//
// 1. Per-worker momentum mu makes the cluster's summed velocity decay by mu
//    once per *round* of `members` updates, not once per update: its memory
//    grows `members`-fold. So each worker uses m^members per own step, for a
//    per-update decay m.
// 2. Asynchrony delays every update already: a gradient is computed on
//    weights read at the start of a step and reaches the peers at their next
//    step boundary, about 1.5 step times later; over a link with latency it
//    also missed what was on its way to its worker, and the peers apply it
//    after what left while it travelled: `round_trip_steps` more (the round
//    trip in this worker's steps, as measured:
//    server::TrainingPort::PeerRoundTripSteps). The others add about
//    (members - 1) updates per step time: a staleness of
//    s = (1.5 + round_trip_steps) (members - 1) updates. Momentum delays a
//    gradient's effect by mu / (1 - mu) updates on average; the per-update
//    decay m takes what is left of that budget:
//    m / (1 - m) = max(0, mu / (1 - mu) - s).
// 3. The rate is scaled so that every gradient still moves the weights
//    lr / (1 - mu) in all: lr x (1 - m^members) / (1 - mu).
// 4. Where the staleness alone is past the budget (m = 0), the rate shrinks
//    by (1 + mu / (1 - mu)) / (1 + s).
// 5. Stability before speed: in the linear model of the cluster, one
//    direction of curvature lambda and every update delayed s, x(t+1) = x(t)
//    + m (x(t) - x(t-1)) - lr' lambda x(t - s) with lr' the per-update rate,
//    the rule is stable up to a sharpness lambda*(m, s, lr'). Staleness
//    lowers it before the budget is spent, and rule 4 holds it at what it is
//    there; a cluster whose lambda* is below that of four workers on a fast
//    link (s = 4.5, the recipe measured at the default flags) has its rate
//    shrunk to match it (docs/training.md "Momentum in a cluster"). Two and
//    three workers on a fast link are more stable than that and unchanged;
//    four behind 10 ms links (s about 10) went from plain SGD at 0.174 at
//    lr 0.02, which diverged in most runs, to 0.115.
//
// At mu 0.9 and 4 workers on a fast link: m 0.818, 0.448 per own step,
// lr x5.52; with a round trip of 3 steps: m 0, lr x4.52.
// members <= 1, or mu outside (0, 1): the rule unchanged.
struct MomentumRule {
  double learning_rate;
  double momentum;
};
MomentumRule MatchMomentumToCluster(double learning_rate, double momentum, int members,
                                    double round_trip_steps = 0);

// residual[i] += delta[i], with delta from the optimizer on
// g = grad + weight_decay * weights:
//   sgd:      delta = -lr g
//   momentum: v = momentum v - lr g;  delta = v      (state = v)
//   adagrad:  h += a^2;  delta = -lr g / (sqrt(h) + eps)  (state = h)
// where AdaGrad's a is g itself (placement local, or `peer_step` empty), or
// with placement aggregate the aggregate gradient
//   a = g - peer_step (sqrt(h_before) + eps) / lr:
// `peer_step` is how far the peers' messages moved each weight since this
// worker's last step (weight units), and a peer's delta -lr g_p / (sqrt(h_p)
// + eps) is turned back into its gradient g_p with this worker's h, which is
// fed the same aggregate. Alone, peer_step is 0 and both placements are the
// same, bit for bit. Either way the rule runs here, before quantization
// (docs/design.md step 4).
// Returns the largest |residual[i]| written, as its float bits (bits &
// 0x7FFFFFFF: Inf above every finite value, NaN above Inf), taken block by
// block right after each is written, from the L1 cache: what
// codec::EncodeWithFeedback's check needs, with no pass of its own over
// the residual.
// With ResidualBound::kNotTaken the bound is not taken and
// codec::kResidualBoundUnknown is returned: only an encoder that checks the
// whole residual needs it (the threshold quantizer checks each element as
// it reads it), and on the build's SSE2 baseline the max is a scalar pass
// (2.5% of a threshold worker's samples).
// REQUIRES: equal sizes (state unused for sgd; peer_step empty or full).
enum class ResidualBound { kTaken, kNotTaken };
uint32_t AccumulateDelta(const OptimizerConfig& config, float lr, std::span<const float> grad,
                         std::span<const float> weights, std::span<float> state,
                         std::span<float> residual, std::span<const float> peer_step = {},
                         ResidualBound bound = ResidualBound::kTaken);

}  // namespace reckon::model

#endif  // RECKON_MODEL_OPTIMIZER_H_
