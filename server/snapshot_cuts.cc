#include "server/snapshot_cuts.h"

#include <algorithm>
#include <random>

#include "absl/strings/str_cat.h"

namespace reckon::server {

uint32_t StripesFor(uint64_t param_count, uint32_t wanted) {
  const uint64_t by_size = std::max<uint64_t>(param_count * sizeof(int64_t) / kMinStripeBytes, 1);
  return static_cast<uint32_t>(
      std::min<uint64_t>({std::max<uint32_t>(wanted, 1), kMaxSnapshotStripes, by_size}));
}

ParamRange StripeRange(uint64_t param_count, uint32_t stripes, uint32_t stripe) {
  // 128-bit products: param_count * stripe must not wrap for any model.
  const auto at = [&](uint64_t i) {
    return static_cast<uint64_t>(static_cast<unsigned __int128>(param_count) * i / stripes);
  };
  return {at(stripe), at(stripe + uint64_t{1})};
}

std::shared_ptr<const SnapshotCut> SnapshotCuts::Keep(SnapshotCut cut, Clock::time_point now) {
  // Unguessable ids: a stripe is served only to an admitted requester
  // anyway, but no peer should fetch a cut by counting.
  static thread_local std::mt19937_64 rng(std::random_device{}());
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  uint64_t id = 0;
  while (id == 0 || Find(id) != kept_.end()) id = rng();
  cut.header.set_cut_id(id);
  cut.header.set_stripe(0);
  const uint32_t stripes = std::max<uint32_t>(cut.header.stripes(), 1);
  auto shared = std::make_shared<const SnapshotCut>(std::move(cut));
  if (stripes > 1 && capacity_ > 0) {
    while (kept_.size() >= capacity_) kept_.pop_front();
    std::vector<bool> asked(stripes, false);
    asked[0] = true;
    kept_.push_back({shared, now, std::move(asked)});
  }
  return shared;
}

absl::StatusOr<std::shared_ptr<const SnapshotCut>> SnapshotCuts::Take(uint64_t cut_id,
                                                                      uint32_t stripe,
                                                                      Clock::time_point now) {
  absl::MutexLock lock(&mu_);
  DropExpired(now);
  auto it = Find(cut_id);
  if (it == kept_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "snapshot cut ", cut_id, " is not kept here (expired, or all its stripes were served); "
        "ask for a new snapshot"));
  }
  if (stripe == 0 || stripe >= it->asked.size()) {
    return absl::InvalidArgumentError(absl::StrCat("stripe ", stripe, " of a snapshot cut in ",
                                                   it->asked.size(),
                                                   " stripes (stripe 0 comes with the cut)"));
  }
  std::shared_ptr<const SnapshotCut> cut = it->cut;
  it->asked[stripe] = true;
  if (std::all_of(it->asked.begin(), it->asked.end(), [](bool b) { return b; })) kept_.erase(it);
  return cut;
}

size_t SnapshotCuts::size() const {
  absl::MutexLock lock(&mu_);
  return kept_.size();
}

std::deque<SnapshotCuts::Kept>::iterator SnapshotCuts::Find(uint64_t cut_id) {
  return std::find_if(kept_.begin(), kept_.end(),
                      [&](const Kept& k) { return k.cut->header.cut_id() == cut_id; });
}

void SnapshotCuts::DropExpired(Clock::time_point now) {
  while (!kept_.empty() && now - kept_.front().made >= ttl_) kept_.pop_front();
}

}  // namespace reckon::server
