#include "server/training_handoff.h"

#include <utility>

namespace reckon::server {

void TrainingHandoff::Queue(std::shared_ptr<const codec::DecodedUpdate> decoded,
                            std::chrono::steady_clock::time_point accepted_at) {
  received_.updates.push_back(std::move(decoded));
  received_.accepted_at.push_back(accepted_at);
}

void TrainingHandoff::ReplaceWeights(std::vector<int64_t> weights) {
  received_.updates.clear();
  received_.accepted_at.clear();
  received_.replace_weights = std::move(weights);
}

Received TrainingHandoff::Take(uint64_t checksum, std::optional<VersionMap> cut) {
  Received out = std::move(received_);
  received_ = Received{};
  out.checksum = checksum;
  out.cut = std::move(cut);
  out.weights_wanted = weights_wanted_;
  return out;
}

void TrainingHandoff::OfferWeights(std::shared_ptr<const TrainingCut> cut) {
  cut_ = std::move(cut);
  weights_wanted_ = false;
}

std::shared_ptr<const TrainingCut> TrainingHandoff::CutSince(
    std::chrono::steady_clock::time_point since) const {
  if (cut_ == nullptr || cut_->made < since) return nullptr;
  return cut_;
}

void TrainingHandoff::DropCut(std::chrono::steady_clock::time_point before) {
  if (cut_ != nullptr && cut_->made < before) cut_.reset();
}

void TrainingHandoff::RecordHash(VersionMap at, std::string hash) {
  hash_.emplace(std::move(at), std::move(hash));
  hash_wanted_ = false;
}

std::optional<std::string> TrainingHandoff::HashAt(const VersionMap& at) const {
  if (!hash_ || !SameVersions(hash_->first, at)) return std::nullopt;
  return hash_->second;
}

void TrainingHandoff::RecordCheck(const VersionMap& at, uint64_t measured, bool passed, double ms) {
  last_check_ms_ = ms;
  if (passed) check_to_announce_ = Member::Check{at, measured};
}

std::optional<Member::Check> TrainingHandoff::TakeCheckToAnnounce() {
  std::optional<Member::Check> out = std::move(check_to_announce_);
  check_to_announce_.reset();
  return out;
}

void TrainingHandoff::SetDone(uint64_t local_steps) {
  done_ = true;
  local_steps_ = local_steps;
}

void TrainingHandoff::AskRejoin(std::string source) {
  if (!rejoin_source_) rejoin_source_ = std::move(source);
}

}  // namespace reckon::server
