// One part of GossipNode's methods (server/node.h; docs/architecture.md "The
// gossip node in parts"). What goes out: every frame to a member goes through
// SendTo (the stream or a lane, server/lanes.h), fresh messages are pushed in
// order per origin, and lanes are opened, answered and forgotten. Each runs on
// the thread and under the lock its declaration in node.h names.
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

void GossipNode::HandleLaneHello(const std::shared_ptr<Link>& link, const v1::Hello& hello) {
  if (LaneRef ours = FindLane(link); ours.member != nullptr) {
    if (!ours.lane.ours) return;  // a second Hello on a lane: ignore
    // The member's answer to our lane: it must be the member we dialed.
    Member& m = *ours.member;
    if (m.links.LaneUp(ours.lane.index)) return;
    if (hello.self().node_id() != m.node_id || hello.self().incarnation() != m.incarnation ||
        hello.lane() != ours.lane.index) {
      core_.Log(absl::StrCat("lane ", ours.lane.index, " to ", m.node_id, " was answered by '",
                             hello.self().node_id().substr(0, 64), "' incarnation ",
                             hello.self().incarnation(), " lane ", hello.lane(), ": closed"));
      ForgetLane(ours, core_.Now());
      return;
    }
    m.links.LaneAnswered(ours.lane.index);
    return;
  }
  if (!core_.membership.table().AwaitsHello(link)) return;
  const std::string& id = hello.self().node_id();
  HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    verdict = {HelloVerdict::kRefuse, "a lane to this node itself", false};
  }
  if (verdict.kind == HelloVerdict::kAdmit) {
    if (std::optional<std::string> why = LaneRefusal(hello, core_.membership.table().members())) {
      verdict = {HelloVerdict::kRefuse, *why, false};
    }
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    core_.counters.Add(Counters::kPeersRefusedFieldNumber);
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = *core_.membership.table().Find(id);  // LaneRefusal found its stream up
  core_.membership.table().StopAwaiting(link);
  m.links.AcceptLane(hello.lane(), link, core_.Now());
  SendCounted(*link, MakeHello(hello.lane()));
}

void GossipNode::HandleLaneFrame(const std::shared_ptr<Link>& link, v1::GossipFrame& frame,
                                 std::optional<ValidatedUpdate> validated, Clock::time_point now) {
  const LaneRef ref = FindLane(link);
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
    ForgetLane(ref, now);
    return;
  }
  m.last_heard = now;
  m.links.CountReceived(ref.lane.index);
  HandleUpdate(m, std::make_shared<v1::GossipFrame>(std::move(frame)), std::move(validated));
}

GossipNode::LaneRef GossipNode::FindLane(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : core_.membership.table()) {
    if (std::optional<MemberLinks::LaneRef> lane = m.links.FindLane(link.get())) {
      return {&m, *lane};
    }
  }
  return {};
}

void GossipNode::ForgetLane(const LaneRef& ref, Clock::time_point now) {
  // A lane of ours lost waits before lanes are dialed again.
  ref.member->links.ForgetLane(ref.lane, now + core_.options.failure_timeout);
}

void GossipNode::DialLanes(Member& m, Clock::time_point now) {
  if (!core_.membership.dials_out() || m.state() != MemberState::kAlive) return;
  // As any dial, two failure timeouts for the answer (a round trip).
  const std::vector<uint32_t> due =
      m.links.LanesToDial(now, now - 2 * core_.options.failure_timeout, core_.lanes);
  if (m.address.empty()) return;
  for (uint32_t index : due) {
    std::shared_ptr<Link> link = core_.membership.Dial(m.address);
    if (!link) return;
    m.links.AddLane(index, link, now);
    SendCounted(*link, MakeHello(index));
  }
}

void GossipNode::SendCounted(Link& link, std::shared_ptr<const v1::GossipFrame> frame) {
  const size_t bytes = frame->ByteSizeLong();
  if (link.Send(std::move(frame), SIZE_MAX))
    core_.counters.Add(Counters::kBytesSentFieldNumber, bytes);
}

void GossipNode::CountSent(const MemberLinks::Sent& sent, bool update) {
  core_.counters.Add(Counters::kBytesSentFieldNumber, sent.bytes);
  if (!update) return;
  core_.counters.Add(Counters::kUpdateFramesSentFieldNumber);
  if (sent.lane != 0) {
    core_.counters.Add(Counters::kLaneUpdateFramesSentFieldNumber);
  }
}

bool GossipNode::SendTo(Member& m, std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
  const bool update = frame->has_update();
  std::optional<MemberLinks::Sent> sent =
      m.links.Send(std::move(frame), byte_cap, core_.lanes,
                   core_.counters.Get(Counters::kUpdateFramesSentFieldNumber));
  if (!sent) return false;
  CountSent(*sent, update);
  return true;
}

bool GossipNode::SendUpdate(Member& m, const OriginKey& origin, uint64_t seq,
                            const std::shared_ptr<const v1::GossipFrame>& frame) {
  std::optional<MemberLinks::Sent> sent =
      m.links.SendUpdate(origin, seq, frame, core_.options.send_queue_byte_cap, core_.lanes,
                         core_.counters.Get(Counters::kUpdateFramesSentFieldNumber));
  if (!sent) return false;
  CountSent(*sent, /*update=*/true);
  uint64_t& ever = m.ever_sent[origin];
  ever = std::max(ever, seq);
  return true;
}

void GossipNode::PushTo(Member& m, const OriginKey& origin, uint64_t seq,
                        const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!m.links.connected() || m.state() != MemberState::kAlive || m.Refuses(origin)) return;
  // In order per origin: behind peers are served by anti-entropy.
  if (std::max(SeqOf(m.links.state().pushed, origin), SeqOf(m.applied, origin)) != seq - 1) {
    return;
  }
  if (!SendUpdate(m, origin, seq, frame)) core_.counters.Add(Counters::kQueueDropsFieldNumber);
}

void GossipNode::ForwardInTree(const OriginKey& origin, uint64_t seq,
                               const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!core_.membership.OriginAlive(origin)) return;
  for (const std::string& child :
       core_.membership.ring().Children(origin.node_id, core_.self.node_id)) {
    if (Member* m = core_.membership.table().Find(child)) PushTo(*m, origin, seq, frame);
  }
}

}  // namespace reckon::server
