// What a node knows of one other member of the cluster: its identity, the
// state the failure detector gives it, its stream, and what its heartbeats
// said. A plain record: GossipNode keeps one per member, by node id, under
// its lock, and its parts (quiescence.h) read them.
#ifndef RECKON_SERVER_MEMBER_H_
#define RECKON_SERVER_MEMBER_H_

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>

#include "server/link.h"
#include "server/version_vector.h"

namespace reckon::server {

using Clock = std::chrono::steady_clock;

// kConnecting: known (a seed's answer, a heartbeat's member list) but not
// reached yet; kAlive: handshaken and heard within the failure timeout;
// kDead: silent past it (its messages still flow through the logs); kLeft:
// said goodbye. Dead and left members count for nothing the live wait on.
enum class MemberState { kConnecting, kAlive, kDead, kLeft };
const char* MemberStateName(MemberState state);  // "connecting", "alive", ...

// An extra stream of a pair for Updates (server/lanes.h). Lanes this node
// dialed carry our Updates to the member; lanes it dialed carry its to us.
struct Lane {
  std::shared_ptr<Link> link;
  bool up = false;  // dialed: the member answered our Hello; accepted: always
  Clock::time_point dialed_at;
  uint64_t frames = 0;  // Update frames sent on it (dialed) or received (accepted)
};

// A member's state that lives as long as one stream with it: reset whole
// when the stream is replaced or gone (GossipNode::ResetStream).
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

  // What was pushed is taken for lost (a lane gone, a snapshot installed):
  // served again from the member's vector.
  void ForgetPushed() {
    pushed.clear();
    pushed_frame.clear();
  }
};

struct Member {
  std::string node_id;
  uint64_t incarnation = 0;
  std::string address;
  MemberState state = MemberState::kConnecting;
  // Somebody heard it: this node reached it, or a member this node reached
  // said in a heartbeat that it hears it (Member.heard). Only such a member
  // counts in the ending's majority (quiescence.h); a name nobody ever
  // heard (made up, an old pod's) counts for nothing. Kept across its
  // incarnations.
  bool vouched = false;
  std::shared_ptr<Link> link;  // handshaken stream, or null
  Clock::time_point first_known, last_heard;
  VersionMap applied;  // from its last heartbeat
  // Highest seq ever queued to it per origin, on any stream, in this
  // incarnation of it: anti-entropy's sends at or below it are resends
  // (Counters::repairs_resent), those above it first copies sent late.
  VersionMap ever_sent;
  // What belongs to the stream `link`: a new stream (or none) starts it
  // afresh (`stream = {}`), nothing kept by hand.
  StreamState stream;
  // Lanes, by index 1..kMaxLanes: ours to it, and its to us. They live only
  // while `link` does. `lanes_accepted`: how many its Hello said it takes;
  // `wants_lanes`: we sent it an Update big enough for one; no lane is
  // dialed before `lanes_after` (a lane lost or refused waits a while).
  std::map<uint32_t, Lane> out_lanes, in_lanes;
  uint32_t lanes_accepted = 0;
  bool wants_lanes = false;
  Clock::time_point lanes_after;
  // The members its last heartbeat said it hears (Member.heard), and since
  // when we hear it (its stream with us began, or it came back from dead): a live origin's messages
  // are relayed to it only when it does not hear that origin and has been with us a failure timeout
  // (anti_entropy.h MayRelay).
  std::set<OriginKey> hears;
  Clock::time_point alive_since;
  bool training_done = false;
  // Its last heartbeat's quiescence phase one, and its weight hash then.
  bool settled = false;
  std::string weight_hash;
  std::set<OriginKey> resync_told;  // told to re-join for these origins
  // Its latest replica check (Heartbeat.checked) not yet compared: we have
  // not applied that far yet. At most one, the newest.
  struct Check {
    VersionMap at;
    uint64_t checksum = 0;
  };
  std::optional<Check> pending_check;
  uint64_t checks_agreed = 0, checks_diverged = 0;

  // It restarted as `new_incarnation`: what the old incarnation said of
  // itself (its vector, training and quiescence) and what was sent to it
  // are forgotten. Its identity, address, state and times stay (its stream,
  // if any, is the caller's to drop).
  void BeginIncarnation(uint64_t new_incarnation) {
    incarnation = new_incarnation;
    applied.clear();
    ever_sent.clear();
    training_done = false;
    settled = false;
    weight_hash.clear();
  }
};

using MemberTable = std::map<std::string, Member>;  // by node id, never our own

}  // namespace reckon::server

#endif  // RECKON_SERVER_MEMBER_H_
