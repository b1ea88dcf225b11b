// What goes out of the gossip node (server/outbound.h).
#include "server/outbound.h"

#include <algorithm>

#include "server/lanes.h"

namespace reckon::server {

using Counters = NodeCore::Counters;

void Outbound::PushPublished() {
  for (const std::shared_ptr<const v1::GossipFrame>& frame : core_.to_push) {
    const uint64_t seq = frame->update().seq();
    if (core_.membership.tree()) {
      ForwardInTree(core_.self, seq, frame);
    } else {
      for (auto& [id, m] : core_.membership.table()) PushTo(m, core_.self, seq, frame);
    }
  }
  core_.to_push.clear();
}

void Outbound::PushTo(Member& m, const OriginKey& origin, uint64_t seq,
                      const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!m.links.connected() || m.state() != MemberState::kAlive || m.Refuses(origin)) return;
  // In order per origin: behind peers are served by anti-entropy.
  if (std::max(SeqOf(m.links.state().pushed, origin), SeqOf(m.applied, origin)) != seq - 1) {
    return;
  }
  if (!SendUpdate(m, origin, seq, frame)) core_.counters.Add(Counters::kQueueDropsFieldNumber);
}

bool Outbound::SendUpdate(Member& m, const OriginKey& origin, uint64_t seq,
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

void Outbound::ForwardInTree(const OriginKey& origin, uint64_t seq,
                             const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!core_.membership.OriginAlive(origin)) return;
  for (const std::string& child :
       core_.membership.ring().Children(origin.node_id, core_.self.node_id)) {
    if (Member* m = core_.membership.table().Find(child)) PushTo(*m, origin, seq, frame);
  }
}

void Outbound::SendCounted(Link& link, std::shared_ptr<const v1::GossipFrame> frame) {
  const size_t bytes = frame->ByteSizeLong();
  if (link.Send(std::move(frame), SIZE_MAX))
    core_.counters.Add(Counters::kBytesSentFieldNumber, bytes);
}

bool Outbound::SendTo(Member& m, std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
  const bool update = frame->has_update();
  std::optional<MemberLinks::Sent> sent =
      m.links.Send(std::move(frame), byte_cap, core_.lanes,
                   core_.counters.Get(Counters::kUpdateFramesSentFieldNumber));
  if (!sent) return false;
  CountSent(*sent, update);
  return true;
}

void Outbound::CountSent(const MemberLinks::Sent& sent, bool update) {
  core_.counters.Add(Counters::kBytesSentFieldNumber, sent.bytes);
  if (!update) return;
  core_.counters.Add(Counters::kUpdateFramesSentFieldNumber);
  if (sent.lane != 0) {
    core_.counters.Add(Counters::kLaneUpdateFramesSentFieldNumber);
  }
}

std::shared_ptr<const v1::GossipFrame> Outbound::MakeHello(uint32_t lane) const {
  auto frame = std::make_shared<v1::GossipFrame>();
  v1::Hello* h = frame->mutable_hello();
  if (lane == 0) {
    h->set_lanes_accepted(kMaxLanes);
  } else {
    h->set_lane(lane);
  }
  *h->mutable_fingerprint() = core_.options.fingerprint;
  h->mutable_self()->set_node_id(core_.self.node_id);
  h->mutable_self()->set_incarnation(core_.self.incarnation);
  h->set_listen_address(core_.options.listen_address);
  h->set_cluster_token(core_.options.cluster_token);
  return frame;
}

Outbound::LaneRef Outbound::FindLane(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : core_.membership.table()) {
    if (std::optional<MemberLinks::LaneRef> lane = m.links.FindLane(link.get())) {
      return {&m, *lane};
    }
  }
  return {};
}

void Outbound::ForgetLane(const LaneRef& ref, Clock::time_point now) {
  // A lane of ours lost waits before lanes are dialed again.
  ref.member->links.ForgetLane(ref.lane, now + core_.options.failure_timeout);
}

void Outbound::DialLanes(Member& m, Clock::time_point now) {
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

}  // namespace reckon::server
