#include "server/applied_replica.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "codec/codec.h"

namespace reckon::server {

AppliedReplica::AppliedReplica(codec::FixedPointReplica mirror,
                               const codec::WeightChecksum& checksum, Prefetch prefetch)
    : mirror_(std::move(mirror)), prefetch_(prefetch), param_count_(mirror_->param_count()) {
  ledger_.Reset(checksum.Of(mirror_->quanta()), {});
}

AppliedReplica::AppliedReplica(uint64_t param_count, uint64_t initial_checksum)
    : prefetch_(Prefetch::kOff), param_count_(param_count) {
  ledger_.Reset(initial_checksum, {});
}

absl::StatusOr<uint64_t> AppliedReplica::Apply(
    const OriginKey& origin, uint64_t seq, uint64_t contribution,
    const codec::DecodedUpdate& decoded,
    const codec::FixedPointReplica::ParallelFor& parallel_for) {
  const uint64_t have = SeqOf(applied_, origin);
  if (seq != have + 1) {
    return absl::FailedPreconditionError(absl::StrCat(origin.ToString().substr(0, 96), " seq ", seq,
                                                      " is not next: ", have, " applied"));
  }
  uint64_t wrapped = 0;
  if (mirror_) {
    const uint64_t wrapped_before = mirror_->wrapped();
    if (absl::Status s = codec::ApplyDecoded(decoded, &*mirror_, prefetch_, parallel_for); !s.ok())
      return s;
    wrapped = mirror_->wrapped() - wrapped_before;
  }
  applied_[origin] = seq;
  ledger_.Add(origin, seq, contribution);
  return wrapped;
}

absl::Status AppliedReplica::Install(
    std::span<const int64_t> weights, const VersionMap& cut, uint64_t checksum,
    const MessageLog& log, std::vector<std::shared_ptr<const codec::DecodedUpdate>>* replayed) {
  if (!mirror_ && replayed == nullptr) {
    return absl::InternalError("a snapshot installed without a mirror must hand on its replay");
  }
  // Kept until the replay succeeded (a logged message that no longer
  // decodes would be a bug, but must not leave a half-installed replica).
  std::vector<int64_t> previous;
  if (mirror_) {
    previous.assign(mirror_->quanta().begin(), mirror_->quanta().end());
    if (absl::Status s = mirror_->Load(weights); !s.ok()) return s;
  } else if (weights.size() != param_count_) {
    return absl::InvalidArgumentError(
        absl::StrCat("a snapshot of ", weights.size(), " weights for a model of ", param_count_));
  }
  std::vector<std::shared_ptr<const codec::DecodedUpdate>> replay;
  ChecksumLedger ledger;
  ledger.Reset(checksum, cut);
  VersionMap applied = cut;
  for (const auto& [origin, entries] : log.origins()) {
    uint64_t next = SeqOf(applied, origin) + 1;
    for (auto it = entries.find(next); it != entries.end() && it->first == next; ++it, ++next) {
      auto decoded = std::make_shared<codec::DecodedUpdate>();
      if (!codec::DecodeUpdate(it->second.frame->update(), decoded.get()).ok() ||
          (mirror_ && !codec::ApplyDecoded(*decoded, &*mirror_).ok())) {
        if (mirror_) (void)mirror_->Load(previous);
        return absl::DataLossError(absl::StrCat("logged message ", origin.ToString(), " seq ",
                                                it->first, " cannot be replayed"));
      }
      if (!mirror_) replay.push_back(std::move(decoded));
      applied[origin] = it->first;
      ledger.Add(origin, it->first, it->second.frame->update().checksum_delta());
    }
  }
  applied_ = std::move(applied);
  ledger_ = std::move(ledger);
  if (replayed != nullptr) *replayed = std::move(replay);
  return absl::OkStatus();
}

}  // namespace reckon::server
