// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). What comes in: an Update validated before anything is
// kept, accepted in order per origin or held as an early arrival; a frame on a
// lane. Each runs on the thread and under the lock its declaration in node.h
// names.
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
    core_.counters.Add(Counters::kDecodeErrorsFieldNumber);
    core_.Log(
        absl::StrCat("dropped an Update from ", from.node_id, ": origin or seq is not valid"));
    return;
  }
  const uint64_t have = SeqOf(core_.state.applied(), origin);
  if (origin == core_.self || update.seq() <= have || core_.early.Holds(origin, update.seq())) {
    core_.counters.Add(Counters::kDuplicatesDroppedFieldNumber);
    return;
  }
  const bool origin_applied = have > 0 || core_.state.applied().count(origin) > 0;
  if (!origin_applied && RefusesNewOrigin(origin)) {
    // Dropped before anything is kept of it.
    core_.counters.Add(Counters::kOriginsRefusedFieldNumber);
    if (core_.counters.Get(Counters::kOriginsRefusedFieldNumber) % 1000 ==
        1) {  // a flood must not flood the log
      core_.Log(absl::StrCat(
          "dropped an Update of a new origin ", origin.ToString().substr(0, 96), " from ",
          from.node_id, ": ", core_.state.applied().size(), " origins known (",
          core_.counters.Get(Counters::kOriginsRefusedFieldNumber), " dropped so far)"));
    }
    return;
  }
  if (core_.signatures != nullptr) {
    // Before anything is kept of it: only its origin can have made it.
    // Verified off the lock already for what came in a batch; here only
    // when its origin's certificate was not known then (a Certificates
    // frame handled since may have brought it: a lookup, no crypto, when
    // still unknown) or it came otherwise.
    const bool checked =
        validated && validated->signature && !absl::IsNotFound(*validated->signature);
    const absl::Status v = checked ? *validated->signature : core_.signatures->Verify(update);
    if (!v.ok()) {
      core_.counters.Add(Counters::kSignatureErrorsFieldNumber);
      if (core_.counters.Get(Counters::kSignatureErrorsFieldNumber) % 1000 ==
          1) {  // a flood must not flood the log
        core_.Log(absl::StrCat("refused Update ", origin.ToString().substr(0, 96), " seq ",
                               update.seq(), " from ", from.node_id, ": ", v.message(), " (",
                               core_.counters.Get(Counters::kSignatureErrorsFieldNumber),
                               " refused so far)"));
      }
      return;
    }
  }
  // Validate everything before anything is kept (docs/wire.md §3.2): done
  // off the lock already for what came in a batch (ValidateUpdates).
  if (!validated) {
    validated = ValidateUpdate(update, core_.param_count, core_.checksum);
  }
  if (!validated->status.ok()) {
    core_.counters.Add(Counters::kDecodeErrorsFieldNumber);
    core_.Log(absl::StrCat("dropped Update ", origin.ToString(), " seq ", update.seq(), " from ",
                           from.node_id, ": ", validated->status.message()));
    return;
  }
  std::shared_ptr<const codec::DecodedUpdate> decoded = std::move(validated->decoded);
  if (update.seq() > have + 1) {
    // Early: wait for the gap to fill (anti-entropy fills it). A drop here
    // is a loss the sender learns of from our heartbeat, and repairs.
    if (!core_.early.Keep(origin, update.seq(), {frame, decoded}, origin_applied))
      core_.counters.Add(Counters::kEarlyDroppedFieldNumber);
    return;
  }
  Accept(origin, frame, decoded);
  if (!origin_applied) core_.early.SetOriginApplied(origin, true);
  AcceptWaiting(origin);
}

bool GossipNode::RefusesNewOrigin(const OriginKey& origin) const {
  // Origins held only as early arrivals count as well as applied ones. A
  // member's current incarnation always gets in (members are capped on
  // their own), so invented origins cannot lock out a real one.
  return !core_.early.HoldsOrigin(origin) &&
         core_.state.applied().size() + core_.early.unapplied_origins() >=
             core_.options.max_origins &&
         !core_.membership.table().IsCurrent(origin);
}

void GossipNode::AcceptWaiting(const OriginKey& origin) {
  while (std::optional<EarlyArrivals::Arrival> next =
             core_.early.TakeNext(origin, SeqOf(core_.state.applied(), origin))) {
    Accept(origin, next->frame, next->decoded);
  }
}

codec::FixedPointReplica::ParallelFor GossipNode::StripedApply(
    const codec::DecodedUpdate& decoded) const {
  const size_t updates = decoded.dense() ? decoded.decoded_quanta().size() : decoded.words.size();
  if (validators_->threads() < 2 || updates < kStripedApplyUpdates) return nullptr;
  return [this](size_t n, const std::function<void(size_t, size_t)>& stripe) {
    validators_->ParallelFor(n, stripe, /*min_chunk=*/kStripedApplyUpdates / 2);
  };
}

void GossipNode::Accept(const OriginKey& origin, std::shared_ptr<const v1::GossipFrame> frame,
                        std::shared_ptr<const codec::DecodedUpdate> decoded) {
  const v1::Update& update = frame->update();
  // Its checksum_delta was verified against its words (HandleUpdate). The
  // mirror adds it after the lock (HandleBatch).
  if (absl::Status s = core_.state.Apply(origin, update.seq(), update.checksum_delta(), decoded);
      !s.ok()) {
    // Next in line (HandleUpdate, AcceptWaiting): not reached.
    core_.counters.Add(Counters::kDecodeErrorsFieldNumber);
    core_.Log(absl::StrCat("could not apply ", origin.ToString(), " seq ", update.seq(), ": ",
                           s.message()));
    return;
  }
  core_.counters.Add(Counters::kUpdatesAppliedFieldNumber);
  if (core_.options.on_accept) core_.options.on_accept(origin, update);
  core_.counters.AddReceived(update.codec(), update.ByteSizeLong());
  core_.handoff.Queue(std::move(decoded), Clock::now());
  if (core_.membership.tree()) outbound::ForwardInTree(core_, origin, update.seq(), frame);
  core_.log.Add(origin, std::move(frame), core_.Now());
}

void GossipNode::HandleLaneFrame(const std::shared_ptr<Link>& link, v1::GossipFrame& frame,
                                 std::optional<ValidatedUpdate> validated, Clock::time_point now) {
  const outbound::LaneRef ref = outbound::FindLane(core_, link);
  if (ref.member == nullptr) return;
  Member& m = *ref.member;
  if (ref.lane.ours || !frame.has_update()) {
    // Lanes carry the dialer's Updates only: a member that sends anything
    // else on one (membership, a heartbeat it could forge a count with)
    // loses the lane, and nothing of the frame is kept.
    const char* kind = frame.body_case() == v1::GossipFrame::kHeartbeat ? "a Heartbeat"
                       : frame.has_update()                             ? "an Update"
                                                                        : "a non-Update frame";
    core_.Log(absl::StrCat("lane ", ref.lane.index, ref.lane.ours ? " to " : " from ", m.node_id,
                           " carried ", kind, ", which lanes do not: closed"));
    // At once: frames of it already in the inbox find no lane.
    outbound::ForgetLane(core_, ref, now);
    return;
  }
  m.last_heard = now;
  m.links.CountReceived(ref.lane.index);
  HandleUpdate(m, std::make_shared<v1::GossipFrame>(std::move(frame)), std::move(validated));
}

}  // namespace reckon::server
