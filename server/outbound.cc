// What goes out of the gossip node (server/outbound.h).
#include "server/outbound.h"

#include <algorithm>

#include "server/lanes.h"

namespace reckon::server::outbound {

using Counters = NodeCore::Counters;

namespace {

void CountSent(NodeCore& core, const MemberLinks::Sent& sent, bool update)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu) {
  core.counters.Add(Counters::kBytesSentFieldNumber, sent.bytes);
  if (!update) return;
  core.counters.Add(Counters::kUpdateFramesSentFieldNumber);
  if (sent.lane != 0) {
    core.counters.Add(Counters::kLaneUpdateFramesSentFieldNumber);
  }
}

}  // namespace

namespace {}  // namespace

void PushPublished(NodeCore& core) {
  for (const std::shared_ptr<const v1::GossipFrame>& frame : core.to_push) {
    const uint64_t seq = frame->update().seq();
    if (core.membership.tree()) {
      ForwardInTree(core, core.self, seq, frame);
    } else {
      for (auto& [id, m] : core.membership.table()) PushTo(core, m, core.self, seq, frame);
    }
  }
  core.to_push.clear();
}

void PushTo(NodeCore& core, Member& m, const OriginKey& origin, uint64_t seq,
            const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!m.links.connected() || m.state() != MemberState::kAlive || m.Refuses(origin)) return;
  // In order per origin: behind peers are served by anti-entropy.
  if (std::max(SeqOf(m.links.state().pushed, origin), SeqOf(m.applied, origin)) != seq - 1) {
    return;
  }
  if (!SendUpdate(core, m, origin, seq, frame)) core.counters.Add(Counters::kQueueDropsFieldNumber);
}

bool SendUpdate(NodeCore& core, Member& m, const OriginKey& origin, uint64_t seq,
                const std::shared_ptr<const v1::GossipFrame>& frame) {
  std::optional<MemberLinks::Sent> sent =
      m.links.SendUpdate(origin, seq, frame, core.options.send_queue_byte_cap, core.lanes,
                         core.counters.Get(Counters::kUpdateFramesSentFieldNumber));
  if (!sent) return false;
  CountSent(core, *sent, /*update=*/true);
  uint64_t& ever = m.ever_sent[origin];
  ever = std::max(ever, seq);
  return true;
}

void ForwardInTree(NodeCore& core, const OriginKey& origin, uint64_t seq,
                   const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!core.membership.OriginAlive(origin)) return;
  for (const std::string& child :
       core.membership.ring().Children(origin.node_id, core.self.node_id)) {
    if (Member* m = core.membership.table().Find(child)) PushTo(core, *m, origin, seq, frame);
  }
}

void SendCounted(NodeCore& core, Link& link, std::shared_ptr<const v1::GossipFrame> frame) {
  const size_t bytes = frame->ByteSizeLong();
  if (link.Send(std::move(frame), SIZE_MAX))
    core.counters.Add(Counters::kBytesSentFieldNumber, bytes);
}

bool SendTo(NodeCore& core, Member& m, std::shared_ptr<const v1::GossipFrame> frame,
            size_t byte_cap) {
  const bool update = frame->has_update();
  std::optional<MemberLinks::Sent> sent =
      m.links.Send(std::move(frame), byte_cap, core.lanes,
                   core.counters.Get(Counters::kUpdateFramesSentFieldNumber));
  if (!sent) return false;
  CountSent(core, *sent, update);
  return true;
}

std::shared_ptr<const v1::GossipFrame> MakeHello(const NodeCore& core, uint32_t lane) {
  auto frame = std::make_shared<v1::GossipFrame>();
  v1::Hello* h = frame->mutable_hello();
  if (lane == 0) {
    h->set_lanes_accepted(kMaxLanes);
  } else {
    h->set_lane(lane);
  }
  *h->mutable_fingerprint() = core.options.fingerprint;
  h->mutable_self()->set_node_id(core.self.node_id);
  h->mutable_self()->set_incarnation(core.self.incarnation);
  h->set_listen_address(core.options.listen_address);
  h->set_cluster_token(core.options.cluster_token);
  return frame;
}

LaneRef FindLane(NodeCore& core, const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : core.membership.table()) {
    if (std::optional<MemberLinks::LaneRef> lane = m.links.FindLane(link.get())) {
      return {&m, *lane};
    }
  }
  return {};
}

void ForgetLane(NodeCore& core, const LaneRef& ref, Clock::time_point now) {
  // A lane of ours lost waits before lanes are dialed again.
  ref.member->links.ForgetLane(ref.lane, now + core.options.failure_timeout);
}

void DialLanes(NodeCore& core, Member& m, Clock::time_point now) {
  if (!core.membership.dials_out() || m.state() != MemberState::kAlive) return;
  // As any dial, two failure timeouts for the answer (a round trip).
  const std::vector<uint32_t> due =
      m.links.LanesToDial(now, now - 2 * core.options.failure_timeout, core.lanes);
  if (m.address.empty()) return;
  for (uint32_t index : due) {
    std::shared_ptr<Link> link = core.membership.Dial(m.address);
    if (!link) return;
    m.links.AddLane(index, link, now);
    SendCounted(core, *link, MakeHello(core, index));
  }
}

}  // namespace reckon::server::outbound
