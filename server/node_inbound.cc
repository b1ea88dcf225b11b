// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). What comes in: an Update validated before anything is
// kept, accepted in order per origin or held as an early arrival; our own
// published; what the training thread takes. Each runs on the thread and under
// the lock its declaration in node.h names.
#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "codec/codec.h"
#include "server/anti_entropy.h"
#include "server/lanes.h"
#include "server/membership.h"
#include "server/node.h"

namespace reckon::server {

void GossipNode::HandleUpdate(Member& from, std::shared_ptr<v1::GossipFrame> frame,
                              std::optional<ValidatedUpdate> validated) {
  const v1::Update& update = frame->update();
  const OriginKey origin = KeyOf(update.origin());
  if (!ValidNodeId(origin.node_id) || update.seq() == 0) {
    counters_.Add(Counters::kDecodeErrorsFieldNumber);
    Log(absl::StrCat("dropped an Update from ", from.node_id, ": origin or seq is not valid"));
    return;
  }
  const uint64_t have = SeqOf(replica_.applied(), origin);
  if (origin == self_ || update.seq() <= have || early_.Holds(origin, update.seq())) {
    counters_.Add(Counters::kDuplicatesDroppedFieldNumber);
    return;
  }
  const bool origin_applied = have > 0 || replica_.applied().count(origin) > 0;
  if (!origin_applied && RefusesNewOrigin(origin)) {
    // Dropped before anything is kept of it.
    counters_.Add(Counters::kOriginsRefusedFieldNumber);
    if (counters_.Get(Counters::kOriginsRefusedFieldNumber) % 1000 ==
        1) {  // a flood must not flood the log
      Log(absl::StrCat("dropped an Update of a new origin ", origin.ToString().substr(0, 96),
                       " from ", from.node_id, ": ", replica_.applied().size(), " origins known (",
                       counters_.Get(Counters::kOriginsRefusedFieldNumber), " dropped so far)"));
    }
    return;
  }
  if (signatures_ != nullptr) {
    // Before anything is kept of it: only its origin can have made it.
    // Verified off the lock already for what came in a batch; here only
    // when its origin's certificate was not known then (a Certificates
    // frame handled since may have brought it: a lookup, no crypto, when
    // still unknown) or it came otherwise.
    const bool checked =
        validated && validated->signature && !absl::IsNotFound(*validated->signature);
    const absl::Status v = checked ? *validated->signature : signatures_->Verify(update);
    if (!v.ok()) {
      counters_.Add(Counters::kSignatureErrorsFieldNumber);
      if (counters_.Get(Counters::kSignatureErrorsFieldNumber) % 1000 ==
          1) {  // a flood must not flood the log
        Log(absl::StrCat("refused Update ", origin.ToString().substr(0, 96), " seq ", update.seq(),
                         " from ", from.node_id, ": ", v.message(), " (",
                         counters_.Get(Counters::kSignatureErrorsFieldNumber), " refused so far)"));
      }
      return;
    }
  }
  // Validate everything before anything is kept (docs/wire.md §3.2): done
  // off the lock already for what came in a batch (ValidateUpdates).
  if (!validated) {
    validated = ValidateUpdate(update, param_count_, checksum_);
  }
  if (!validated->status.ok()) {
    counters_.Add(Counters::kDecodeErrorsFieldNumber);
    Log(absl::StrCat("dropped Update ", origin.ToString(), " seq ", update.seq(), " from ",
                     from.node_id, ": ", validated->status.message()));
    return;
  }
  std::shared_ptr<const codec::DecodedUpdate> decoded = std::move(validated->decoded);
  if (update.seq() > have + 1) {
    // Early: wait for the gap to fill (anti-entropy fills it). A drop here
    // is a loss the sender learns of from our heartbeat, and repairs.
    if (!early_.Keep(origin, update.seq(), {frame, decoded}, origin_applied))
      counters_.Add(Counters::kEarlyDroppedFieldNumber);
    return;
  }
  Accept(origin, frame, decoded);
  if (!origin_applied) early_.SetOriginApplied(origin, true);
  AcceptWaiting(origin);
}

bool GossipNode::RefusesNewOrigin(const OriginKey& origin) const {
  // Origins held only as early arrivals count as well as applied ones. A
  // member's current incarnation always gets in (members are capped on
  // their own), so invented origins cannot lock out a real one.
  return !early_.HoldsOrigin(origin) &&
         replica_.applied().size() + early_.unapplied_origins() >= options_.max_origins &&
         !membership_.table().IsCurrent(origin);
}

void GossipNode::AcceptWaiting(const OriginKey& origin) {
  while (std::optional<EarlyArrivals::Arrival> next =
             early_.TakeNext(origin, SeqOf(replica_.applied(), origin))) {
    Accept(origin, next->frame, next->decoded);
  }
}

codec::FixedPointReplica::ParallelFor GossipNode::StripedApply(
    const codec::DecodedUpdate& decoded) {
  const size_t updates = decoded.dense() ? decoded.quanta.size() : decoded.words.size();
  if (validators_->threads() < 2 || updates < kStripedApplyUpdates ||
      std::this_thread::get_id() != node_thread_id_) {
    return nullptr;
  }
  return [this](size_t n, const std::function<void(size_t, size_t)>& stripe) {
    validators_->ParallelFor(n, stripe, /*min_chunk=*/kStripedApplyUpdates / 2);
  };
}

void GossipNode::CountWrapped(const OriginKey& origin, uint64_t seq, uint64_t wrapped) {
  if (wrapped == 0) return;
  counters_.Add(Counters::kWeightsWrappedFieldNumber, wrapped);
  // Counted under mu_ here (the node thread and Publish): the total read
  // back is this call's.
  const uint64_t total = counters_.Get(Counters::kWeightsWrappedFieldNumber);
  if ((total - wrapped) / 1000 != total / 1000 ||
      total == wrapped) {  // a flood must not flood the log
    Log(absl::StrCat(origin.ToString().substr(0, 96), " seq ", seq, " took ", wrapped,
                     " weights past the int64 range: they wrapped (", total, " so far)"));
  }
}

void GossipNode::Accept(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
                        std::shared_ptr<const codec::DecodedUpdate> decoded) {
  const v1::Update& update = frame->update();
  // Its checksum_delta was verified against its words (HandleUpdate).
  absl::StatusOr<uint64_t> wrapped = replica_.Apply(origin, update.seq(), update.checksum_delta(),
                                                    *decoded, StripedApply(*decoded));
  if (!wrapped.ok()) {
    // Validated already (DecodeUpdate against this model) and next in
    // line: not reached.
    counters_.Add(Counters::kDecodeErrorsFieldNumber);
    Log(absl::StrCat("could not apply ", origin.ToString(), " seq ", update.seq(), ": ",
                     wrapped.status().message()));
    return;
  }
  CountWrapped(origin, update.seq(), *wrapped);
  counters_.Add(Counters::kUpdatesAppliedFieldNumber);
  if (options_.on_accept) options_.on_accept(origin, update);
  counters_.AddReceived(update.codec(), update.ByteSizeLong());
  handoff_.Queue(std::move(decoded), Clock::now());
  if (membership_.tree()) ForwardInTree(origin, update.seq(), frame);
  log_.Add(origin, std::move(frame), Now());
}

absl::Status GossipNode::Publish(v1::Update message, const codec::DecodedUpdate& decoded) {
  // The frame that goes out, its checksum contribution and its signature
  // are made before the lock: the node thread does not wait on them.
  auto frame = std::make_shared<v1::GossipFrame>();
  *frame->mutable_update() = std::move(message);
  const v1::Update& update = frame->update();
  const uint64_t contribution = codec::ChecksumContribution(checksum_, decoded);
  frame->mutable_update()->set_checksum_delta(contribution);
  if (signatures_ != nullptr) signatures_->Sign(frame->mutable_update());
  {
    absl::MutexLock l(&mu_);
    if (update.seq() != last_published_ + 1) {
      return absl::InternalError(
          absl::StrCat("published seq ", update.seq(), " after ", last_published_));
    }
    absl::StatusOr<uint64_t> wrapped = replica_.Apply(self_, update.seq(), contribution, decoded);
    if (!wrapped.ok()) return wrapped.status();
    CountWrapped(self_, update.seq(), *wrapped);
    last_published_ = update.seq();
    log_.Add(self_, frame, Now());
    // Pushed by the node thread (PushPublished): a send may write to the
    // socket on the calling thread (gRPC's StartWrite on an idle stream,
    // about 60 us each), and the training thread is not to pay that once
    // per member every step, nor hold the node's lock meanwhile (8 members:
    // 0.5 ms of a 2.9 ms CPU step, `reckonctl bench inbound`).
    to_push_.push_back(frame);
    changed_.SignalAll();
  }
  inbox_.Wake();
  return absl::OkStatus();
}

void GossipNode::PushPublished() {
  for (const std::shared_ptr<const v1::GossipFrame>& frame : to_push_) {
    const uint64_t seq = frame->update().seq();
    if (membership_.tree()) {
      ForwardInTree(self_, seq, frame);
    } else {
      for (auto& [id, m] : membership_.table()) PushTo(m, self_, seq, frame);
    }
  }
  to_push_.clear();
}

Received GossipNode::TakeReceived(bool with_cut) {
  absl::MutexLock l(&mu_);
  return TakeLocked(with_cut);
}

Received GossipNode::TakeLocked(bool with_cut) {
  with_cut = with_cut || handoff_.weights_wanted();
  return handoff_.Take(replica_.ledger().total(),
                       with_cut ? std::optional<VersionMap>(replica_.applied()) : std::nullopt);
}

void GossipNode::OfferTrainingCut(VersionMap at, uint64_t checksum, std::vector<int64_t> weights) {
  auto cut = std::make_shared<TrainingCut>(
      TrainingCut{std::move(at), checksum, std::move(weights), Clock::now()});
  absl::MutexLock l(&mu_);
  handoff_.OfferWeights(std::move(cut));
}

}  // namespace reckon::server
