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
  return out;
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

void TrainingHandoff::AskResync(std::string source) {
  if (!resync_source_) resync_source_ = std::move(source);
}

}  // namespace reckon::server
