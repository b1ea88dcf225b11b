// What goes out of the gossip node (docs/architecture.md "The gossip node in
// parts"): every frame to a member goes through SendTo (its stream or a lane:
// member_links.h picks the link) and is counted here; fresh messages are
// pushed in order per origin, to every member or down the origin's tree (our
// own once the training thread queued them); lanes are dialed, found and
// forgotten; the Hello that opens a stream or a lane is made here.
//
// Functions over the node's core (node_core.h), not an object holding one:
// each names the core it works on, so that clang's thread-safety analysis
// sees the very lock the caller holds.
//
// Threads: the node thread, and whoever else holds the node's lock
// (NodeCore::mu) while a message is accepted (a snapshot's install replays
// early arrivals on the training thread): every function but MakeHello
// requires it. Never blocks: a send queue over its cap refuses the frame
// (false) and the caller decides whether that is a drop (queue_drops).
#ifndef RECKON_SERVER_OUTBOUND_H_
#define RECKON_SERVER_OUTBOUND_H_

#include <cstdint>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "proto/reckon.pb.h"
#include "server/link.h"
#include "server/member.h"
#include "server/member_links.h"
#include "server/node_core.h"
#include "server/version_vector.h"

namespace reckon::server {

namespace outbound {

// Sends our messages published since the last call (TrainingPort::Publish queues
// them) to every member, or down our tree, in seq order.
void PushPublished(NodeCore& core) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Direct broadcast of a fresh message, when it is next in order for `m`.
void PushTo(NodeCore& core, Member& m, const OriginKey& origin, uint64_t seq,
            const std::shared_ptr<const v1::GossipFrame>& frame)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// The one place Updates go out to a member: records the pushed seq and
// the frame that carried it.
// False (nothing recorded) when the send queue is over its cap.
bool SendUpdate(NodeCore& core, Member& m, const OriginKey& origin, uint64_t seq,
                const std::shared_ptr<const v1::GossipFrame>& frame)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Pushes a fresh message of `origin` to our children in its tree.
void ForwardInTree(NodeCore& core, const OriginKey& origin, uint64_t seq,
                   const std::shared_ptr<const v1::GossipFrame>& frame)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// A frame on a link not bound to a member yet, or for the last time
// (Hello, Refusal, Leave): sent and its bytes counted, nothing else.
void SendCounted(NodeCore& core, Link& link, std::shared_ptr<const v1::GossipFrame> frame)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Every frame to a bound member goes through here (member_links.h picks
// the link; counted here).
bool SendTo(NodeCore& core, Member& m, std::shared_ptr<const v1::GossipFrame> frame,
            size_t byte_cap) ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// `lane` 0: the pair's stream's Hello (it says how many lanes we accept).
std::shared_ptr<const v1::GossipFrame> MakeHello(const NodeCore& core, uint32_t lane = 0);
struct LaneRef {
  Member* member = nullptr;
  MemberLinks::LaneRef lane;
};
LaneRef FindLane(NodeCore& core, const std::shared_ptr<Link>& link)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Aborts a lane and forgets it at once (MemberLinks::ForgetLane); lanes
// to that member wait a failure timeout before they are dialed again.
void ForgetLane(NodeCore& core, const LaneRef& lane, Clock::time_point now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);
// Dials the lanes m should have and lacks; aborts ours it never answered.
void DialLanes(NodeCore& core, Member& m, Clock::time_point now)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(core.mu);

}  // namespace outbound

}  // namespace reckon::server

#endif  // RECKON_SERVER_OUTBOUND_H_
