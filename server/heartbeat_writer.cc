#include "server/heartbeat_writer.h"

#include <algorithm>
#include <utility>

namespace reckon::server {

HeartbeatWriter::HeartbeatWriter(Options options)
    : options_(std::move(options)),
      far_every_(static_cast<uint64_t>(std::clamp<int64_t>(
          options_.failure_timeout / (4 * options_.heartbeat_interval), 1, 10))) {}

bool HeartbeatWriter::Due(const Member& m, bool tree, const Ring& ring) const {
  if (!tree || ring.Neighbours(options_.self.node_id, m.node_id)) return true;
  return ticks_ % far_every_ == 0;
}

HeartbeatWriter::Bases HeartbeatWriter::Make(const v1::Heartbeat& said, const VersionMap& applied,
                                             bool tick) {
  auto changes = std::make_shared<v1::GossipFrame>();
  v1::Heartbeat* hb = changes->mutable_heartbeat();
  *hb = said;
  hb->clear_applied();
  auto whole = std::make_shared<v1::GossipFrame>(*changes);
  ToProto(applied, whole->mutable_heartbeat()->mutable_applied());
  if (!tick) return {whole, nullptr};
  // One walk of both (sorted) maps: what is new or moved on, and whether
  // an origin went back or is gone (a snapshot installed).
  bool went_back = false;
  v1::VersionVector* changed = hb->mutable_applied();
  auto before = announced_.begin();
  for (const auto& [origin, seq] : applied) {
    while (before != announced_.end() && before->first < origin) {
      went_back = true;  // announced, no longer in our vector
      ++before;
    }
    const bool known = before != announced_.end() && before->first == origin;
    const uint64_t was = known ? before->second : 0;
    if (known) ++before;
    if (seq < was) went_back = true;
    if (seq == was) continue;
    v1::VersionEntry* e = changed->add_entries();
    e->mutable_origin()->set_node_id(origin.node_id);
    e->mutable_origin()->set_incarnation(origin.incarnation);
    e->set_seq(seq);
  }
  if (before != announced_.end()) went_back = true;
  hb->set_applied_changes_only(true);
  if (changed->entries_size() > 0 || went_back) announced_ = applied;
  if (went_back) return {whole, nullptr};
  return {whole, changes};
}

void HeartbeatWriter::AddMemberList(v1::Heartbeat* hb, const MemberTable& table) const {
  v1::Member* me = hb->add_members();
  me->set_node_id(options_.self.node_id);
  me->set_incarnation(options_.self.incarnation);
  me->set_address(options_.listen_address);
  for (const auto& [id, m] : table) {
    if (m.state() == MemberState::kLeft || m.address.empty()) continue;
    v1::Member* other = hb->add_members();
    other->set_node_id(id);
    other->set_incarnation(m.incarnation);
    other->set_address(m.address);
    other->set_heard(m.state() == MemberState::kAlive);
  }
}

std::shared_ptr<const v1::GossipFrame> HeartbeatWriter::For(Member& m, const Bases& bases,
                                                            const MemberTable& table) const {
  StreamState& stream = m.links.state();
  const bool member_list =
      stream.heartbeats_sent++ % static_cast<uint64_t>(std::max(1, options_.member_list_every)) ==
      0;
  // The receiver has our vector as of the previous tick only if the stream
  // had that tick's heartbeat (queued in order, after the whole one).
  const bool changes_do = bases.changes != nullptr && !member_list &&
                          stream.heartbeat_tick.has_value() && *stream.heartbeat_tick + 1 == ticks_;
  auto frame = std::make_shared<v1::GossipFrame>(changes_do ? *bases.changes : *bases.whole);
  frame->mutable_heartbeat()->set_frames_received(stream.frames_received);
  for (uint64_t frames : m.links.LaneFramesReceived()) {
    frame->mutable_heartbeat()->add_lane_frames_received(frames);
  }
  if (member_list) AddMemberList(frame->mutable_heartbeat(), table);
  // What it applied that we refuse: those found since, and all of them with
  // the member list (a heartbeat lost on the way is made good there).
  auto tell = [&frame](const OriginKey& origin) {
    v1::Origin* o = frame->mutable_heartbeat()->add_refused_origins();
    o->set_node_id(origin.node_id);
    o->set_incarnation(origin.incarnation);
  };
  if (member_list) {
    for (const OriginKey& origin : m.refused_here) tell(origin);
  } else {
    for (const OriginKey& origin : m.refused_untold) tell(origin);
  }
  m.refused_untold.clear();
  return frame;
}

}  // namespace reckon::server
