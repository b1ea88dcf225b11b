#include "server/mirror.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace reckon::server {

Mirror::Mirror(codec::FixedPointReplica replica, Prefetch prefetch)
    : param_count_(replica.param_count()), prefetch_(prefetch), replica_(std::move(replica)) {}

void Mirror::Queue(const OriginKey& origin, uint64_t seq,
                   std::shared_ptr<const codec::DecodedUpdate> decoded) {
  absl::MutexLock l(&mu_);
  queued_.push_back({origin, seq, std::move(decoded)});
}

void Mirror::AddLocked(const Queued& q, const StripesFor& stripes_for) {
  const uint64_t wrapped_before = replica_.wrapped();
  const codec::ParallelFor stripes = stripes_for ? stripes_for(*q.decoded) : nullptr;
  if (absl::Status s = codec::ApplyDecoded(*q.decoded, &replica_, prefetch_, stripes); !s.ok()) {
    report_.failed.push_back(
        absl::Status(s.code(), absl::StrCat("could not add ", q.origin.ToString().substr(0, 96),
                                            " seq ", q.seq, " to the mirror: ", s.message())));
    return;
  }
  if (const uint64_t wrapped = replica_.wrapped() - wrapped_before; wrapped > 0) {
    report_.wrapped.push_back({q.origin, q.seq, wrapped});
  }
}

void Mirror::AddAllLocked(const StripesFor& stripes_for) {
  while (!queued_.empty()) {
    AddLocked(queued_.front(), stripes_for);
    queued_.pop_front();
  }
}

Mirror::Report Mirror::AddQueued(const StripesFor& stripes_for) {
  absl::MutexLock l(&mu_);
  AddAllLocked(stripes_for);
  return std::exchange(report_, {});
}

void Mirror::Read(absl::FunctionRef<void(const codec::FixedPointReplica&)> read) {
  absl::MutexLock l(&mu_);
  AddAllLocked(nullptr);
  read(replica_);
}

std::vector<int64_t> Mirror::CopyWeights() {
  std::vector<int64_t> weights;
  Read([&](const codec::FixedPointReplica& r) {
    weights.assign(r.quanta().begin(), r.quanta().end());
  });
  return weights;
}

absl::Status Mirror::Replace(std::span<const int64_t> weights,
                             std::span<const std::shared_ptr<const codec::DecodedUpdate>> replay) {
  absl::MutexLock l(&mu_);
  AddAllLocked(nullptr);
  // Kept until the replay succeeded (a logged message that no longer
  // applies would be a bug, but must not leave half-replaced weights).
  std::vector<int64_t> previous(replica_.quanta().begin(), replica_.quanta().end());
  if (absl::Status s = replica_.Load(weights); !s.ok()) return s;
  for (size_t i = 0; i < replay.size(); ++i) {
    if (absl::Status s = codec::ApplyDecoded(*replay[i], &replica_, prefetch_); !s.ok()) {
      (void)replica_.Load(previous);
      return absl::DataLossError(
          absl::StrCat("replayed message ", i, " does not apply: ", s.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace reckon::server
