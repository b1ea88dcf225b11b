// Trainer's momentum rule (trainer.h RematchMomentum): matched to the
// workers training and the round trip to them, before every step.
#include <algorithm>
#include <cmath>

#include "absl/strings/str_format.h"
#include "model/optimizer.h"
#include "worker/trainer.h"

namespace reckon::worker {

void Trainer::RematchMomentum() {
  const int members = std::max(1, options_.peers->TrainingMembers());
  double round_trip = 0;
  if (members > 1) {
    if (!first_step_with_peers_) first_step_with_peers_ = steps_done_;
    round_trip = options_.peers->PeerRoundTripSteps();
    if (round_trip < 0) round_trip = static_cast<double>(steps_done_ - *first_step_with_peers_);
    round_trip = std::round(2 * round_trip) / 2;
  }
  if (members == matched_members_ && round_trip == matched_round_trip_) return;
  const model::MomentumRule rule =
      model::MatchMomentumToCluster(1.0, config_.optimizer.momentum, members, round_trip);
  backend_->SetMomentum(rule.momentum);
  momentum_now_ = rule.momentum;
  lr_scale_ = rule.learning_rate;
  const bool news = members != matched_members_ || std::fabs(round_trip - logged_round_trip_) >= 1;
  matched_members_ = members;
  matched_round_trip_ = round_trip;
  summary_.max_training_members = std::max(summary_.max_training_members, members);
  summary_.max_peer_round_trip_steps = std::max(summary_.max_peer_round_trip_steps, round_trip);
  if (!news) return;
  logged_round_trip_ = round_trip;
  log_ << absl::StrFormat(
      "reckon-worker: %d workers training%s: momentum %.4g per own step, learning rate x%.3g "
      "(matched to one worker's momentum %.4g)\n",
      members,
      round_trip > 0 ? absl::StrFormat(", a round trip of %.1f steps to them", round_trip) : "",
      rule.momentum, rule.learning_rate, config_.optimizer.momentum);
}

}  // namespace reckon::worker
