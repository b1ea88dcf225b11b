#include "server/applied_state.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"

namespace reckon::server {

AppliedState::AppliedState(codec::FixedPointReplica mirror, const codec::WeightChecksum& checksum,
                           Prefetch prefetch)
    : param_count_(mirror.param_count()) {
  ledger_.Reset(checksum.Of(mirror.quanta()), {});
  mirror_ = std::make_shared<Mirror>(std::move(mirror), prefetch);
}

AppliedState::AppliedState(uint64_t param_count, uint64_t initial_checksum)
    : param_count_(param_count) {
  ledger_.Reset(initial_checksum, {});
}

absl::Status AppliedState::Apply(const OriginKey& origin, uint64_t seq, uint64_t contribution,
                                 std::shared_ptr<const codec::DecodedUpdate> decoded) {
  const uint64_t have = SeqOf(applied_, origin);
  if (seq != have + 1) {
    return absl::FailedPreconditionError(absl::StrCat(origin.ToString().substr(0, 96), " seq ", seq,
                                                      " is not next: ", have, " applied"));
  }
  if (mirror_) mirror_->Queue(origin, seq, std::move(decoded));
  applied_[origin] = seq;
  ledger_.Add(origin, seq, contribution);
  return absl::OkStatus();
}

absl::Status AppliedState::Install(
    std::span<const int64_t> weights, const VersionMap& cut, uint64_t checksum,
    const MessageLog& log, std::vector<std::shared_ptr<const codec::DecodedUpdate>>* replayed) {
  if (!mirror_ && replayed == nullptr) {
    return absl::InternalError("a snapshot installed without a mirror must hand on its replay");
  }
  if (weights.size() != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a snapshot of ", weights.size(), " weights for a model of ", param_count_));
  }
  // Decoded before anything changes (a logged message that no longer
  // decodes would be a bug, but must not leave a half-installed replica).
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> replay;
  ChecksumLedger ledger;
  ledger.Reset(checksum, cut);
  VersionMap applied = cut;
  for (const auto& [origin, entries] : log.origins()) {
    uint64_t next = SeqOf(applied, origin) + 1;
    for (auto it = entries.find(next); it != entries.end() && it->first == next; ++it, ++next) {
      auto decoded = std::make_shared<codec::DecodedUpdate>();
      if (!codec::DecodeUpdate(it->second.frame->update(), decoded.get()).ok()) {
        return absl::DataLossError(absl::StrCat("logged message ", origin.ToString(), " seq ",
                                                it->first, " cannot be replayed"));
      }
      replay.push_back(std::move(decoded));
      applied[origin] = it->first;
      ledger.Add(origin, it->first, it->second.frame->update().checksum_delta());
    }
  }
  if (mirror_) {
    if (absl::Status s = mirror_->Replace(weights, replay); !s.ok()) return s;
  }
  applied_ = std::move(applied);
  ledger_ = std::move(ledger);
  if (replayed != nullptr) *replayed = std::move(replay);
  return absl::OkStatus();
}

}  // namespace reckon::server
