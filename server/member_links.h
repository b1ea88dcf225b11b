// A member's links (docs/architecture.md "The gossip node in parts"): its
// handshaken stream, the lanes of the pair both ways (server/lanes.h), and
// what was sent and received on them since the stream began. The node decides
// when a stream is attached or dropped and when lanes are dialed; this part
// keeps the links consistent whatever it decides:
//   - lanes live only while the stream does: dropping or replacing the stream
//     aborts every lane;
//   - a new stream starts its state afresh (StreamState), nothing kept by hand;
//   - an Update goes on the least loaded of the stream and our lanes up
//     (PickLane), and what carried each origin's last push is recorded, so a
//     heartbeat tells loss from lateness (ForgetLost, lanes.h ProcessedThrough).
// Socket-free: tests drive it with fake links (tests/server/member_links_test.cc).
//
// Threads: owned by the member's record (Member::links), which the node keeps
// in its member table; only the node's thread and its public methods use it,
// under the node's lock. Links are called (Send, Abort, QueuedBytes) under
// that lock: their reactions only enqueue (link.h).
#ifndef RECKON_SERVER_MEMBER_LINKS_H_
#define RECKON_SERVER_MEMBER_LINKS_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "google/protobuf/repeated_field.h"
#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/version_vector.h"

namespace reckon::server {

using Clock = std::chrono::steady_clock;

// An extra stream of a pair for Updates (server/lanes.h). Lanes this node
// dialed carry our Updates to the member; lanes it dialed carry its to us.
struct Lane {
  std::shared_ptr<Link> link;
  bool up = false;  // dialed: the member answered our Hello; accepted: always
  Clock::time_point dialed_at;
  uint64_t frames = 0;  // Update frames sent on it (dialed) or received (accepted)
};

// What lives as long as one stream with a member: reset whole when the
// stream is replaced or gone.
struct StreamState {
  VersionMap pushed;  // highest seq pushed per origin on the stream
  // Per origin, the frames sent on the stream (entry 0) and on each of our
  // lanes to it (entry i: lane i) when pushed[o] went out: once the peer
  // processed that many on each (server/lanes.h ProcessedThrough), what it
  // lacks up to pushed[o] was lost, not merely overtaken on another lane.
  std::map<OriginKey, std::vector<uint64_t>> pushed_frame;
  // Frames sent on the stream and received from it, after the Hellos. The
  // peer's heartbeat echoes its count of ours: once it has processed the
  // frames that carried pushed[o] and all before it (pushed_frame[o]) and
  // still lacks o's messages up to it, one was lost there (dropped from a
  // full early buffer, corrupt) and is served again. Nothing else counts as
  // lost: a slow link is not a lossy one. Both count Update frames only: a
  // heartbeat may overtake the updates queued before it.
  uint64_t frames_sent = 0, frames_received = 0;
  // Heartbeats sent on the stream: every NodeOptions::member_list_every-th
  // one, the first included, carries our member list.
  uint64_t heartbeats_sent = 0;
  // The node's tick (GossipNode::ticks_) of the last heartbeat queued on
  // the stream: the next tick's may carry only the vector's changes.
  std::optional<uint64_t> heartbeat_tick;
  // When the stream was attached (its Hello judged): a second stream of the
  // same incarnation is a dial race only while the first is this new
  // (membership.h JudgeHello).
  Clock::time_point attached;

  // What was pushed is taken for lost (a lane gone, a snapshot installed):
  // served again from the member's vector.
  void ForgetPushed() {
    pushed.clear();
    pushed_frame.clear();
  }
};

// How Updates use lanes (NodeOptions::lanes, lane_min_bytes).
struct LanePolicy {
  uint32_t lanes = 0;          // lanes we open to a member at most (0-16)
  size_t min_bytes = 1 << 20;  // an Update this big may take a lane, and asks for them
};

class MemberLinks {
 public:
  // The handshaken stream, or null.
  const std::shared_ptr<Link>& stream() const { return stream_; }
  bool connected() const { return stream_ != nullptr; }
  StreamState& state() { return state_; }
  const StreamState& state() const { return state_; }

  // `link` becomes the stream, its state fresh; a previous stream (another
  // link) and every lane are aborted. `lanes_accepted`: how many lanes the
  // member's Hello said it takes (capped at kMaxLanes); `now` is kept as
  // StreamState::attached.
  void Attach(std::shared_ptr<Link> link, uint32_t lanes_accepted, Clock::time_point now);
  // Aborts the stream and every lane and forgets them (Abort, not Close: a
  // dead or departed peer may never finish the write in flight, and Close
  // would wait on it forever). Afterwards as for a member never reached,
  // but for lanes_after.
  void Drop();
  // The stream closed by itself: forgotten with its state; lanes aborted.
  void StreamClosed();
  // Every link: the stream and the lanes both ways (to close them all).
  std::vector<std::shared_ptr<Link>> All() const;

  // --- sending ---
  struct Sent {
    size_t bytes = 0;
    uint32_t lane = 0;  // 0: the stream
  };
  // Queues `frame` unless the link's queue holds `byte_cap` or more (nullopt,
  // also with no stream). Heartbeats go ahead of what waits (SendUrgent);
  // other frames but Updates go on the stream; an Update of at least
  // policy.min_bytes on the one of the stream and our lanes up with the
  // least queued (`turn` breaks ties round robin: PickLane), and marks the
  // member as one we want lanes to. Update frames are counted per link, as
  // the member counts what it received.
  std::optional<Sent> Send(std::shared_ptr<const v1::GossipFrame> frame, size_t byte_cap,
                           const LanePolicy& policy, uint64_t turn);
  // Send for an Update carrying `origin`'s message `seq`: on success it is
  // recorded as pushed, with the frame counts of every link (the frontier
  // ForgetLost compares with the member's heartbeat).
  std::optional<Sent> SendUpdate(const OriginKey& origin, uint64_t seq,
                                 const std::shared_ptr<const v1::GossipFrame>& frame,
                                 size_t byte_cap, const LanePolicy& policy, uint64_t turn);
  // The member's heartbeat says it processed `frames_received` of our
  // stream's Update frames and `lanes_received` (entry i-1: lane i) of our
  // lanes': each origin whose pushed messages it processed the carriers of
  // and still lacks (its vector `applied`) is pushed again from what it has.
  void ForgetLost(const VersionMap& applied, uint64_t frames_received,
                  const google::protobuf::RepeatedField<uint64_t>& lanes_received);
  // The fewest bytes queued on the stream or on one of our lanes up (0
  // with no stream).
  size_t LeastQueued() const;
  // Bytes queued on the stream and our lanes, in all.
  uint64_t QueuedBytes() const;

  // --- receiving ---
  // An Update frame came on the stream (0) or the member's lane `lane`.
  void CountReceived(uint32_t lane);
  // For our heartbeat: Update frames received on each of the member's lanes
  // to us, entry i-1 for lane i (empty without lanes).
  std::vector<uint64_t> LaneFramesReceived() const;

  // --- lanes ---
  struct LaneRef {
    uint32_t index = 0;
    bool ours = false;  // a lane we dialed (to the member) or it did (to us)
  };
  std::optional<LaneRef> FindLane(const Link* link) const;
  // The member's answer to our lane `index`: it is up.
  void LaneAnswered(uint32_t index);
  bool LaneUp(uint32_t index) const;
  // The member opened its lane `index` to us (replacing one it dialed before).
  void AcceptLane(uint32_t index, std::shared_ptr<Link> link, Clock::time_point now);
  // Aborts a lane and forgets it at once (its frames still in the inbox find
  // no lane). One of ours also loses what it carried (ForgetPushed: served
  // again) and no lane is dialed before `retry_at`.
  void ForgetLane(const LaneRef& lane, Clock::time_point retry_at);
  // Aborts our lanes unanswered since before `deadline`, then: the indexes
  // of the lanes to dial now (wanted, allowed by both sides and the policy,
  // not open, not before lanes_after). The caller dials each and AddLane.
  std::vector<uint32_t> LanesToDial(Clock::time_point now, Clock::time_point unanswered_before,
                                    const LanePolicy& policy);
  void AddLane(uint32_t index, std::shared_ptr<Link> link, Clock::time_point now);
  uint32_t lanes_up() const;  // ours, answered
  uint32_t lanes_in() const { return static_cast<uint32_t>(in_lanes_.size()); }

 private:
  void DropLanes();

  std::shared_ptr<Link> stream_;
  StreamState state_;
  // Lanes, by index 1..kMaxLanes: ours to it, and its to us.
  std::map<uint32_t, Lane> out_lanes_, in_lanes_;
  // How many its Hello said it takes; whether we sent it an Update big
  // enough for one; no lane is dialed before `lanes_after_` (a lane lost or
  // refused waits a while).
  uint32_t lanes_accepted_ = 0;
  bool wants_lanes_ = false;
  Clock::time_point lanes_after_;
};

}  // namespace reckon::server

#endif  // RECKON_SERVER_MEMBER_LINKS_H_
