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
    if (!ours.dialed) return;  // a second Hello on a lane: ignore
    // The member's answer to our lane: it must be the member we dialed.
    Member& m = *ours.member;
    Lane& lane = m.out_lanes[ours.index];
    if (lane.up) return;
    if (hello.self().node_id() != m.node_id || hello.self().incarnation() != m.incarnation ||
        hello.lane() != ours.index) {
      Log(absl::StrCat("lane ", ours.index, " to ", m.node_id, " was answered by '",
                       hello.self().node_id().substr(0, 64), "' incarnation ",
                       hello.self().incarnation(), " lane ", hello.lane(), ": closed"));
      ForgetLane(ours, Now());
      return;
    }
    lane.up = true;
    return;
  }
  if (!pending_.Contains(link)) return;
  const std::string& id = hello.self().node_id();
  HelloVerdict verdict = Judge(*link, hello);
  if (verdict.kind == HelloVerdict::kSelfDial) {
    verdict = {HelloVerdict::kRefuse, "a lane to this node itself", false};
  }
  if (verdict.kind == HelloVerdict::kAdmit) {
    if (std::optional<std::string> why = LaneRefusal(hello, members_)) {
      verdict = {HelloVerdict::kRefuse, *why, false};
    }
  }
  if (verdict.kind == HelloVerdict::kRefuse) {
    counters_.set_peers_refused(counters_.peers_refused() + 1);
    Refuse(link, id, verdict.reason, verdict.permanent);
    return;
  }
  Member& m = members_[id];
  pending_.Remove(link);
  Lane& lane = m.in_lanes[hello.lane()];
  if (lane.link) lane.link->Abort();  // the member dialed that lane again
  lane = Lane{link, true, Now(), 0};
  SendCounted(*link, MakeHello(hello.lane()));
}

void GossipNode::HandleLaneFrame(const std::shared_ptr<Link>& link, v1::GossipFrame& frame,
                                 Clock::time_point now) {
  const LaneRef ref = FindLane(link);
  if (ref.member == nullptr) return;
  Member& m = *ref.member;
  if (ref.dialed || !frame.has_update()) {
    // Lanes carry the dialer's Updates only: a member that sends anything
    // else on one (membership, a heartbeat it could forge a count with)
    // loses the lane, and nothing of the frame is kept.
    const char* kind = frame.body_case() == v1::GossipFrame::kHeartbeat ? "a Heartbeat"
                       : frame.has_update()                             ? "an Update"
                                                                        : "a non-Update frame";
    Log(absl::StrCat("lane ", ref.index, ref.dialed ? " to " : " from ", m.node_id, " carried ",
                     kind, ", which lanes do not: closed"));
    // At once: frames of it already in the inbox find no lane.
    ForgetLane(ref, now);
    return;
  }
  m.last_heard = now;
  ++m.in_lanes[ref.index].frames;
  HandleUpdate(m, std::make_shared<v1::GossipFrame>(std::move(frame)));
}

GossipNode::LaneRef GossipNode::FindLane(const std::shared_ptr<Link>& link) {
  for (auto& [id, m] : members_) {
    for (const auto& [index, lane] : m.out_lanes) {
      if (lane.link == link) return {&m, index, true};
    }
    for (const auto& [index, lane] : m.in_lanes) {
      if (lane.link == link) return {&m, index, false};
    }
  }
  return {};
}

void GossipNode::ForgetLane(const LaneRef& lane, Clock::time_point now) {
  Member& m = *lane.member;
  auto& lanes = lane.dialed ? m.out_lanes : m.in_lanes;
  auto it = lanes.find(lane.index);
  if (it == lanes.end()) return;
  it->second.link->Abort();
  lanes.erase(it);
  if (!lane.dialed) return;
  // What went on it and was not processed is lost: served again from the
  // member's vector (what is merely late arrives as a duplicate, dropped).
  // A lane lost waits before it is dialed again.
  m.stream.ForgetPushed();
  m.lanes_after = now + options_.failure_timeout;
}

void GossipNode::DropLanes(Member& m) {
  for (auto& [index, lane] : m.out_lanes) lane.link->Abort();
  for (auto& [index, lane] : m.in_lanes) lane.link->Abort();
  m.out_lanes.clear();
  m.in_lanes.clear();
}

void GossipNode::DialLanes(Member& m, Clock::time_point now) {
  if (!dialer_ || m.state != MemberState::kAlive) return;
  for (auto& [index, lane] : m.out_lanes) {
    // As any dial, two failure timeouts for the answer (a round trip).
    if (!lane.up && now - lane.dialed_at > 2 * options_.failure_timeout) lane.link->Abort();
  }
  const uint32_t wanted = std::min({options_.lanes, m.lanes_accepted, kMaxLanes});
  if (!m.wants_lanes || now < m.lanes_after || m.address.empty()) return;
  for (uint32_t index = 1; index <= wanted; ++index) {
    if (m.out_lanes.count(index)) continue;
    std::shared_ptr<Link> link = dialer_(m.address);
    if (!link) return;
    m.out_lanes[index] = Lane{link, false, now, 0};
    SendCounted(*link, MakeHello(index));
  }
}

size_t GossipNode::LeastQueued(const Member& m) const {
  size_t least = m.link ? m.link->QueuedBytes() : 0;
  for (const auto& [index, lane] : m.out_lanes) {
    if (lane.up) least = std::min(least, lane.link->QueuedBytes());
  }
  return least;
}

void GossipNode::SendCounted(Link& link, std::shared_ptr<const v1::GossipFrame> frame) {
  const size_t bytes = frame->ByteSizeLong();
  if (link.Send(std::move(frame), SIZE_MAX))
    counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
}

bool GossipNode::SendTo(Member& m, std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap) {
  if (!m.link) return false;
  const size_t bytes = frame->ByteSizeLong();
  if (frame->has_heartbeat()) {
    if (!m.link->SendUrgent(std::move(frame), byte_cap)) return false;
    counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
    return true;
  }
  if (!frame->has_update()) {
    if (!m.link->Send(std::move(frame), byte_cap)) return false;
    counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
    return true;
  }
  const bool big = bytes >= options_.lane_min_bytes;
  if (big && options_.lanes > 0) m.wants_lanes = true;
  uint32_t lane = 0;
  if (big && !m.out_lanes.empty()) {  // small ones stay on the stream: no queue is read
    std::vector<std::optional<size_t>> queued(m.out_lanes.rbegin()->first + 1);
    queued[0] = m.link->QueuedBytes();
    for (const auto& [index, l] : m.out_lanes) {
      if (l.up) queued[index] = l.link->QueuedBytes();
    }
    lane = PickLane(bytes, options_.lane_min_bytes, queued, counters_.update_frames_sent());
  }
  Link& link = lane == 0 ? *m.link : *m.out_lanes[lane].link;
  if (!link.Send(frame, byte_cap)) return false;
  counters_.set_bytes_sent(counters_.bytes_sent() + bytes);
  counters_.set_update_frames_sent(counters_.update_frames_sent() + 1);
  // As the peer counts: updates only, per link.
  if (lane == 0) {
    ++m.stream.frames_sent;
  } else {
    ++m.out_lanes[lane].frames;
    counters_.set_lane_update_frames_sent(counters_.lane_update_frames_sent() + 1);
  }
  return true;
}

void GossipNode::ResetStream(Member& m) { m.stream = {}; }

bool GossipNode::SendUpdate(Member& m, const OriginKey& origin, uint64_t seq,
                            const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!SendTo(m, frame, options_.send_queue_byte_cap)) return false;
  m.stream.pushed[origin] = seq;
  std::vector<uint64_t>& frontier = m.stream.pushed_frame[origin];
  frontier.assign(m.out_lanes.empty() ? 1 : m.out_lanes.rbegin()->first + 1, 0);
  frontier[0] = m.stream.frames_sent;
  for (const auto& [index, lane] : m.out_lanes) frontier[index] = lane.frames;
  uint64_t& ever = m.ever_sent[origin];
  ever = std::max(ever, seq);
  return true;
}

void GossipNode::PushTo(Member& m, const OriginKey& origin, uint64_t seq,
                        const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!m.link || m.state != MemberState::kAlive) return;
  // In order per origin: behind peers are served by anti-entropy.
  if (std::max(SeqOf(m.stream.pushed, origin), SeqOf(m.applied, origin)) != seq - 1) return;
  if (!SendUpdate(m, origin, seq, frame)) counters_.set_queue_drops(counters_.queue_drops() + 1);
}

void GossipNode::ForwardInTree(const OriginKey& origin, uint64_t seq,
                               const std::shared_ptr<const v1::GossipFrame>& frame) {
  if (!OriginAlive(origin)) return;
  for (const std::string& child : ring_.Children(origin.node_id, self_.node_id)) {
    auto m = members_.find(child);
    if (m != members_.end()) PushTo(m->second, origin, seq, frame);
  }
}

}  // namespace reckon::server
